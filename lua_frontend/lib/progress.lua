-- progress.lua — st.progress: progress reporting for long loops.
--
--   local p = st.progress.new(total, {desc = "epoch 1", unit = "img"})
--   p:update(n, {loss = 0.43})   -- n more units done; optional postfix values
--   p:close()                    -- final line
--
-- Modes: "bar" (a single line redrawn with \r: bar, count/total, throughput, elapsed, ETA,
-- postfix), "plain" (whole lines, at most one per ~10% of the total or per `interval` seconds, for
-- logs and pipes) or "off". Default: ST_PROGRESS=0 -> off, ST_PROGRESS=1 -> bar, ST_PROGRESS=plain
-- -> plain; otherwise bar when stdout is a terminal (st._isatty()) and plain when it is not.
-- Invariant: redraws are throttled on the wall clock (st._now(), falling back to os.time()), so the
-- cost per update() is a clock read and a comparison, whatever the loop's speed.
local st = ...

local M = {}

local now = st._now or os.time

local function default_mode()
  local e = os.getenv("ST_PROGRESS")
  if e == "0" or e == "off" then return "off" end
  if e == "1" or e == "bar" then return "bar" end
  if e == "plain" then return "plain" end
  if st._isatty then return st._isatty() and "bar" or "plain" end
  local term = os.getenv("TERM")
  if term and term ~= "" and term ~= "dumb" then return "bar" end
  return "plain"
end
M.default_mode = default_mode

-- 75 -> "01:15", 3725 -> "1:02:05".
local function fmt_time(s)
  if s ~= s or s == math.huge or s < 0 then return "?" end
  s = math.floor(s + 0.5)
  local h, m, sec = s // 3600, (s % 3600) // 60, s % 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, sec) end
  return string.format("%02d:%02d", m, sec)
end
M.format_time = fmt_time

local function fmt_rate(r)
  if r >= 100 then return string.format("%.0f", r) end
  if r >= 10 then return string.format("%.1f", r) end
  return string.format("%.2f", r)
end

local function fmt_value(v)
  if st.is_tensor(v) then v = v:item() end
  if math.type(v) == "float" then return string.format("%.4g", v) end
  return tostring(v)
end

local Progress = {}
Progress.__index = Progress
M.Progress = Progress

-- new(total, {desc, unit = "it", mode, file = io.stdout, width = 30, interval, min_redraw}):
-- total may be nil (unknown: no bar, no ETA).
function M.new(total, opts)
  opts = opts or {}
  if total ~= nil and (type(total) ~= "number" or total < 0) then
    error("progress.new: total must be a number >= 0 or nil, got " .. tostring(total), 2)
  end
  local mode = opts.mode or default_mode()
  if mode ~= "bar" and mode ~= "plain" and mode ~= "off" then
    error("progress.new: mode must be \"bar\", \"plain\" or \"off\", got " .. tostring(mode), 2)
  end
  local t = now()
  local self = setmetatable({
    total = total, n = 0, desc = opts.desc, unit = opts.unit or "it", mode = mode,
    file = opts.file or io.stdout, width = opts.width or 30,
    interval = opts.interval or 10.0,        -- plain: at most this long without a line
    min_redraw = opts.min_redraw or 0.1,     -- bar: at most one redraw per this many seconds
    start = t, last_draw = t, last_plain_n = 0, postfix = {}, postfix_keys = {},
    closed = false, last_len = 0,
  }, Progress)
  if mode == "bar" then self:_draw_bar(t) end
  return self
end

-- set_postfix(tbl): values shown after the counters (numbers, strings, or 0-d tensors, read with
-- :item() only when a line is drawn). Keys keep their first-seen order.
function Progress:set_postfix(tbl)
  if tbl == nil then return end
  local keys = {}
  for k in pairs(tbl) do
    if self.postfix[k] == nil then keys[#keys + 1] = tostring(k) end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do self.postfix_keys[#self.postfix_keys + 1] = k end
  for k, v in pairs(tbl) do self.postfix[tostring(k)] = v end
end

function Progress:_postfix_text()
  local parts = {}
  for _, k in ipairs(self.postfix_keys) do
    local v = self.postfix[k]
    if v ~= nil then parts[#parts + 1] = k .. "=" .. fmt_value(v) end
  end
  return table.concat(parts, ", ")
end

function Progress:_stats(t)
  local elapsed = t - self.start
  local rate = elapsed > 0 and self.n / elapsed or 0
  local eta
  if self.total and rate > 0 then eta = (self.total - self.n) / rate end
  return elapsed, rate, eta
end

-- The bar: "desc:  45%|█████████▍          | 211/469 [00:03<00:04, 61.2 img/s, loss=0.4312]".
function Progress:_line_bar(t)
  local elapsed, rate, eta = self:_stats(t)
  local head = self.desc and (self.desc .. ": ") or ""
  local mid
  if self.total and self.total > 0 then
    local frac = math.min(1, self.n / self.total)
    local cells = frac * self.width
    local full = math.floor(cells)
    local eighths = math.floor((cells - full) * 8)
    local partial = ""
    if full < self.width and eighths > 0 then
      partial = ({ "▏", "▎", "▍", "▌", "▋", "▊", "▉" })[eighths]
    end
    local pad = self.width - full - (partial ~= "" and 1 or 0)
    mid = string.format("%3d%%|%s%s%s| %s/%s", math.floor(frac * 100), string.rep("█", full), partial,
      string.rep(" ", pad), tostring(self.n), tostring(self.total))
  else
    mid = tostring(self.n) .. " " .. self.unit
  end
  local timing = "[" .. fmt_time(elapsed)
  if self.total then timing = timing .. "<" .. (eta and fmt_time(eta) or "?") end
  timing = timing .. ", " .. fmt_rate(rate) .. " " .. self.unit .. "/s"
  local pf = self:_postfix_text()
  if pf ~= "" then timing = timing .. ", " .. pf end
  return head .. mid .. " " .. timing .. "]"
end

-- A plain line: "epoch 1: 47/469 (10%), 61.2 img/s, elapsed 00:03, eta 00:27, loss=0.4312".
function Progress:_line_plain(t)
  local elapsed, rate, eta = self:_stats(t)
  local parts = {}
  if self.total then
    local pct = self.total > 0 and math.floor(100 * self.n / self.total) or 100
    parts[1] = string.format("%s/%s (%d%%)", tostring(self.n), tostring(self.total), pct)
  else
    parts[1] = tostring(self.n) .. " " .. self.unit
  end
  parts[#parts + 1] = fmt_rate(rate) .. " " .. self.unit .. "/s"
  parts[#parts + 1] = "elapsed " .. fmt_time(elapsed)
  if eta and self.n < self.total then parts[#parts + 1] = "eta " .. fmt_time(eta) end
  local pf = self:_postfix_text()
  if pf ~= "" then parts[#parts + 1] = pf end
  return (self.desc and (self.desc .. ": ") or "") .. table.concat(parts, ", ")
end

function Progress:_draw_bar(t)
  local line = self:_line_bar(t)
  -- pad over the previous line's leftovers (the length counts bytes: a few spaces too many at worst)
  local pad = self.last_len > #line and string.rep(" ", self.last_len - #line) or ""
  self.file:write("\r", line, pad)
  self.file:flush()
  self.last_len = #line
  self.last_draw = t
end

function Progress:_draw_plain(t)
  self.file:write(self:_line_plain(t), "\n")
  self.file:flush()
  self.last_draw = t
  self.last_plain_n = self.n
end

-- update([n = 1] [, postfix]): n more units done.
function Progress:update(n, postfix)
  if type(n) == "table" then n, postfix = 1, n end
  self.n = self.n + (n or 1)
  if postfix then self:set_postfix(postfix) end
  if self.mode == "off" or self.closed then return end
  local t = now()
  if self.mode == "bar" then
    if t - self.last_draw >= self.min_redraw or (self.total and self.n >= self.total) then
      self:_draw_bar(t)
    end
  else
    local step = self.total and self.total / 10 or math.huge
    if self.n - self.last_plain_n >= step or t - self.last_draw >= self.interval then
      if not (self.total and self.n >= self.total) then self:_draw_plain(t) end
    end
  end
end

-- close([postfix]): the final state (a last redraw and a newline, or a last plain line). Idempotent.
function Progress:close(postfix)
  if self.closed then return end
  if postfix then self:set_postfix(postfix) end
  self.closed = true
  if self.mode == "off" then return end
  local t = now()
  if self.mode == "bar" then
    self:_draw_bar(t)
    self.file:write("\n")
    self.file:flush()
  else
    self:_draw_plain(t)
  end
end
Progress.__close = Progress.close

-- Seconds since new().
function Progress:elapsed() return now() - self.start end

-- wrap(iterable, opts): iterates over a DataLoader (or anything with __len and iter()/__call, or a
-- Lua array) and updates a progress bar by one per item, or by opts.count(values...) when given
-- (e.g. count = function(xb) return xb:size(1) end with total = the number of samples).
-- The bar closes when the iteration ends.
function M.wrap(iterable, opts)
  opts = opts or {}
  local nopts = {}
  for k, v in pairs(opts) do if k ~= "count" and k ~= "total" then nopts[k] = v end end
  local total = opts.total
  local it
  if type(iterable) == "table" and type(iterable.iter) == "function" then
    it = iterable:iter()
    if total == nil then total = #iterable end
  elseif type(iterable) == "function" then
    it = iterable
  elseif type(iterable) == "table" then
    local i = 0
    it = function() i = i + 1; return iterable[i] end
    if total == nil then total = #iterable end
  else
    error("progress.wrap: expected a loader, an iterator function or an array", 2)
  end
  local p = M.new(total, nopts)
  local count = opts.count
  return function()
    local vals = table.pack(it())
    if vals[1] == nil then
      p:close()
      return nil
    end
    p:update(count and count(table.unpack(vals, 1, vals.n)) or 1)
    return table.unpack(vals, 1, vals.n)
  end, p
end

return M
