/*
 * main.c — the `stitch` executable: Lua 5.4 with the stitch module preloaded as the global `st`.
 *
 *   stitch [options] [script [args]]
 *     -e code   run code          -i   enter the REPL after running the script / -e code
 *     -v        print the version  -h   this help           -    run stdin as a script
 *
 * With no script and no -e, it runs the REPL. The REPL reads with libedit (history in
 * ~/.stitch_history; Tab completes names through st._complete, lua_frontend/lib/repl.lua) when
 * stdin is a terminal, and plain lines otherwise (tests pipe input into it). It defines the global
 * help (st.help) unless a script already did. A line is tried as an expression first
 * ("return " .. line) and its values are printed; an incomplete chunk (the parser's "<eof>"
 * message) reads more lines. Errors print a traceback and the REPL goes on. After each command,
 * and after the script or -e code, it waits for the devices (st_synchronize): a GPU reports an
 * index error (a gather out of range) only at its next synchronization point, so work that nothing
 * read afterwards would otherwise lose it; it is reported like any error (after a script or -e
 * code: exit status 1). Ctrl-C while a command runs
 * interrupts it (a Lua hook for Lua code, st_interrupt() for a running flush, a C compiler run
 * included) and returns to the prompt (in script mode it ends the script).
 *
 * Invariants: the SIGINT handler only sets a hook and calls st_interrupt() (both signal-safe); it
 * is installed only while a command runs, so Ctrl-C at the prompt behaves as the terminal default.
 * The completion hook runs at the prompt, between commands: it calls Lua only under lua_pcall and
 * leaves the stack as it found it.
 */
#include "lstitch.h"

#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#define ST_PROGNAME "stitch"
#define ST_VERSION "stitch 0.1 (" LUA_RELEASE ")"
#define ST_HISTORY ".stitch_history"
#define ST_MAXINPUT 4096

static lua_State *g_L;                  /* the state the SIGINT handler interrupts */
static volatile sig_atomic_t g_sigint; /* a Ctrl-C arrived during the current command */

/* ---- interrupts (the lua.c technique: a hook raises the error at the next Lua instruction) ---- */

static void on_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

static void on_sigint(int sig) {
    int mask = LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT;
    signal(sig, SIG_DFL); /* a second Ctrl-C kills a process stuck outside Lua and stitch */
    g_sigint = 1;
    st_interrupt();
    lua_sethook(g_L, on_hook, mask, 1);
}

/* Message handler: the error as a string plus a traceback. */
static int msghandler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Calls the function below narg arguments with the message handler and Ctrl-C armed. */
static int docall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    g_L = L;
    signal(SIGINT, on_sigint);
    int status = lua_pcall(L, narg, nres, base);
    signal(SIGINT, SIG_DFL);
    lua_sethook(L, NULL, 0, 0); /* an interrupt that arrived after the last Lua instruction */
    if (g_sigint) {
        g_sigint = 0;
        st_clear_interrupt(); /* a Ctrl-C during Lua code must not fail the next command's flush */
    }
    lua_remove(L, base);
    return status;
}

static void report(lua_State *L, int status) {
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "%s: %s\n", ST_PROGNAME, msg ? msg : "(error object is not a string)");
        fflush(stderr);
        lua_pop(L, 1);
    }
}

/* Waits for the devices after a chunk ran: an error its GPU work left that nothing has read since
 * (an index out of range in a gather whose result never reached the host) is reported like the
 * chunk's own errors, saying where it was found. what: "the script", "the command". */
static int wait_devices(const char *where, const char *what) {
    if (st_synchronize() == ST_OK) return LUA_OK;
    fflush(stdout);   /* what the chunk printed comes first */
    fprintf(stderr, "%s: %s%s%s (found when %s ended; st.synchronize() waits for the devices and reports it sooner)\n",
            ST_PROGNAME, where ? where : "", where ? ": " : "", st_last_error_base(1), what);
    fflush(stderr);
    st_clear_error();
    return LUA_ERRRUN;
}

static int dochunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    report(L, status);
    if (status == LUA_OK) status = wait_devices("(command line)", "the code");
    return status;
}

/* ---- the arg table: arg[0] = script, arg[1..] = its arguments, negative = interpreter + options */

static void create_arg_table(lua_State *L, char **argv, int argc, int script) {
    int narg = argc - (script + 1);
    lua_createtable(L, narg, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int run_script(lua_State *L, char **argv, int argc, int script) {
    int top = lua_gettop(L);
    const char *fname = argv[script];
    if (strcmp(fname, "-") == 0 && strcmp(argv[script - 1], "--") != 0) fname = NULL; /* stdin */
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = argc - script - 1;
        luaL_checkstack(L, n + 3, "too many arguments to script");
        for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
        status = docall(L, n, LUA_MULTRET);
        if (status == LUA_OK) lua_settop(L, top); /* drop the script's results */
    }
    report(L, status);
    if (status == LUA_OK) status = wait_devices(fname ? fname : "stdin", "the script");
    return status;
}

/* ---- the REPL ---- */

static int g_tty;
static char g_histfile[1024];

/* ---- Tab completion (libedit calls complete() on Tab; terminals only) ----
 * libedit hands over the word before the cursor (split at rl_basic_word_break_characters, which
 * leave out . and :, so the word is a whole chain: "st.nn.Lin", "x:res") and replaces it with what
 * we return. The candidates come from st._complete(word) (lua_frontend/lib/repl.lua): whole name
 * chains ("st.nn.Linear") and the byte where the chain starts; what precedes the chain in the word
 * ("a.." in "a..st.ma") is put back in front. */

#define ST_MAXCAND 4096
static lua_State *g_repl_L;
static char *g_cand[ST_MAXCAND];
static int g_ncand, g_nextcand;

static void free_candidates(void) {
    for (int i = 0; i < g_ncand; i++) free(g_cand[i]);
    g_ncand = g_nextcand = 0;
}

/* libedit's generator: hands out the prepared candidates (it frees them). */
static char *next_candidate(const char *text, int state) {
    (void)text;
    (void)state;
    if (g_nextcand >= g_ncand) return NULL;
    char *c = g_cand[g_nextcand];
    g_cand[g_nextcand++] = NULL;
    return c;
}

/* st._complete(word), run under lua_pcall (reading st._complete may load repl.lua). */
static int call_complete(lua_State *L) {
    lua_getglobal(L, "st");
    lua_getfield(L, -1, "_complete");
    lua_pushvalue(L, 1);
    lua_call(L, 1, 2);
    return 2;
}

/* Fills g_cand with st._complete(word)'s candidates, each with what precedes its chain in word in
 * front; none when it fails. Leaves the stack as it found it. */
static void find_candidates(lua_State *L, const char *word) {
    int top = lua_gettop(L);
    free_candidates();
    size_t len = strlen(word);
    lua_pushcfunction(L, call_complete);
    lua_pushlstring(L, word, len);
    if (lua_pcall(L, 1, 2, 0) != LUA_OK || !lua_istable(L, -2) || !lua_isinteger(L, -1)) {
        lua_settop(L, top);
        return;
    }
    lua_Integer pos = lua_tointeger(L, -1) - 1; /* where the chain starts in word, 0-based */
    if (pos < 0 || (size_t)pos > len) {
        lua_settop(L, top);
        return;
    }
    for (lua_Integer i = 1; g_ncand < ST_MAXCAND && lua_rawgeti(L, -2, i) == LUA_TSTRING; i++) {
        size_t n;
        const char *c = lua_tolstring(L, -1, &n);
        char *m = malloc((size_t)pos + n + 1);
        if (m) {
            memcpy(m, word, (size_t)pos);
            memcpy(m + pos, c, n + 1);
            g_cand[g_ncand++] = m;
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top);
}

static char **complete(const char *text, int start, int end) {
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* no file name completion when nothing matches */
    find_candidates(g_repl_L, text);
    if (g_ncand == 0) return NULL;
    char **m = rl_completion_matches(text, next_candidate);
    free_candidates();
    return m;
}

static void init_completion(lua_State *L) {
    g_repl_L = L;
    rl_attempted_completion_function = complete;
    /* libedit's default plus Lua's operators and brackets; not . and : ("x:res" is one word) */
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(+-*/%^~#,[]";
    rl_completion_append_character = '\0';
}

/* Reads one line (without its newline) into a malloc'ed string; NULL at end of input. */
static char *read_line(const char *prompt) {
    if (g_tty) return readline(prompt);
    char buf[ST_MAXINPUT];
    size_t cap = 0, len = 0;
    char *line = NULL;
    for (;;) {
        if (!fgets(buf, sizeof buf, stdin)) break;
        size_t n = strlen(buf);
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *nl = realloc(line, cap);
            if (!nl) {
                free(line);
                return NULL;
            }
            line = nl;
        }
        memcpy(line + len, buf, n + 1);
        len += n;
        if (len > 0 && line[len - 1] == '\n') {
            line[--len] = '\0';
            break;
        }
    }
    return line;
}

/* An incomplete chunk: the parser stopped at the end of the input. */
static int incomplete(lua_State *L, int status) {
    if (status == LUA_ERRSYNTAX) {
        size_t lmsg;
        const char *msg = lua_tolstring(L, -1, &lmsg);
        const char *eof = "<eof>";
        size_t leof = strlen(eof);
        if (lmsg >= leof && strcmp(msg + lmsg - leof, eof) == 0) {
            lua_pop(L, 1);
            return 1;
        }
    }
    return 0;
}

/* Reads and compiles one command; pushes the compiled function (status LUA_OK) or an error
 * message. Returns -1 at end of input. */
static int load_command(lua_State *L) {
    char *line = read_line("> ");
    if (!line) return -1;
    /* expression first: "return " .. line */
    lua_pushfstring(L, "return %s;", line);
    size_t rlen;
    const char *ret = lua_tolstring(L, -1, &rlen);
    int status = luaL_loadbuffer(L, ret, rlen, "=stdin");
    lua_remove(L, -2);
    if (status == LUA_OK) {
        if (g_tty && line[0]) add_history(line);
        free(line);
        return LUA_OK;
    }
    lua_pop(L, 1);
    /* a statement, possibly spanning lines */
    lua_pushstring(L, line);
    free(line);
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, -1, &len);
        status = luaL_loadbuffer(L, code, len, "=stdin");
        if (!incomplete(L, status)) break;
        char *more = read_line(">> ");
        if (!more) {
            /* end of input inside a chunk: report the syntax error */
            status = luaL_loadbuffer(L, code, len, "=stdin");
            break;
        }
        lua_pushliteral(L, "\n");
        lua_pushstring(L, more);
        free(more);
        lua_concat(L, 3); /* the text so far .. "\n" .. the new line */
    }
    if (g_tty) {
        const char *code = lua_tostring(L, -2);
        if (code && code[0]) add_history(code);
    }
    lua_remove(L, -2); /* the text */
    return status;
}

/* Prints the values left on the stack by a command, with the global print. */
static void print_results(lua_State *L) {
    int n = lua_gettop(L);
    if (n == 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, 1);
    int status = lua_pcall(L, n, 0, 0);
    if (status != LUA_OK) {
        fprintf(stderr, "%s: error calling 'print' (%s)\n", ST_PROGNAME, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
}

/* The global help (st.help, lua_frontend/lib/repl.lua), unless a script made its own. */
static int set_help(lua_State *L) {
    if (lua_getglobal(L, "help") == LUA_TNIL && lua_getglobal(L, "st") == LUA_TTABLE) {
        lua_getfield(L, -1, "help");
        lua_setglobal(L, "help");
    }
    return 0;
}

static void repl(lua_State *L) {
    g_tty = isatty(STDIN_FILENO);
    if (g_tty) {
        const char *home = getenv("HOME");
        if (home) snprintf(g_histfile, sizeof g_histfile, "%s/%s", home, ST_HISTORY);
        using_history();
        stifle_history(1000);
        if (g_histfile[0]) read_history(g_histfile); /* failure is fine */
        init_completion(L);
    }
    lua_settop(L, 0);
    lua_pushcfunction(L, set_help);
    report(L, lua_pcall(L, 0, 0, 0)); /* a failure (broken ST_LUA_LIB) is printed; the REPL goes on */
    for (;;) {
        int status = load_command(L);
        if (status == -1) break;
        if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) print_results(L);
        else report(L, status);
        wait_devices(NULL, "the command");   /* after every command, so an error comes with its line */
        lua_settop(L, 0);
        fflush(stdout);
    }
    if (g_tty) {
        if (g_histfile[0]) write_history(g_histfile);
        fputc('\n', stdout);
    }
    fflush(stdout);
}

/* ---- main ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [options] [script [args]]\n"
            "  -e code  run code\n"
            "  -i       enter the REPL after running script / code\n"
            "  -v       show version\n"
            "  -h       show this help\n"
            "  --       stop handling options\n"
            "  -        run stdin as a script\n"
            "With no script and no -e: the REPL. The module is preloaded as the global `st`.\n",
            ST_PROGNAME);
}

/* Runs the whole program inside a protected call so that memory errors while setting up are
 * reported too. */
static int pmain(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    int interactive = 0, ran = 0, script = 0, version = 0;
    int i;
    /* pass 1: options up to the script name */
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            script = i;
            break;
        }
        if (strcmp(a, "--") == 0) {
            if (i + 1 < argc) script = i + 1;
            break;
        }
        if (strcmp(a, "-") == 0) {
            script = i;
            break;
        }
        if (strcmp(a, "-e") == 0) {
            if (++i >= argc) {
                usage(stderr);
                lua_pushboolean(L, 0);
                return 1;
            }
        } else if (strncmp(a, "-e", 2) == 0) {
        } else if (strcmp(a, "-i") == 0) {
            interactive = 1;
        } else if (strcmp(a, "-v") == 0) {
            version = 1;
        } else if (strcmp(a, "-h") == 0) {
            usage(stdout);
            lua_pushboolean(L, 1);
            return 1;
        } else {
            fprintf(stderr, "%s: unrecognized option '%s'\n", ST_PROGNAME, a);
            usage(stderr);
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    if (version) printf("%s\n", ST_VERSION);

    luaL_openlibs(L);
    luaL_requiref(L, "stitch", luaopen_stitch, 0);
    lua_setglobal(L, "st");
    create_arg_table(L, argv, argc, script ? script : 0);

    /* pass 2: run -e chunks in order */
    int limit = script ? script : argc;
    for (i = 1; i < limit; i++) {
        const char *code = NULL;
        if (strcmp(argv[i], "-e") == 0) code = argv[++i];
        else if (strncmp(argv[i], "-e", 2) == 0) code = argv[i] + 2;
        if (!code) continue;
        ran = 1;
        if (dochunk(L, luaL_loadbuffer(L, code, strlen(code), "=(command line)")) != LUA_OK) {
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    if (script) {
        ran = 1;
        if (run_script(L, argv, argc, script) != LUA_OK) {
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    if (interactive || (!ran && !version)) {
        if (!interactive && isatty(STDIN_FILENO)) printf("%s  (the module is `st`; Ctrl-D exits)\n", ST_VERSION);
        repl(L);
    }
    lua_pushboolean(L, 1);
    return 1;
}

int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s: cannot create state: not enough memory\n", ST_PROGNAME);
        return EXIT_FAILURE;
    }
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int ok = status == LUA_OK && lua_toboolean(L, -1);
    if (status != LUA_OK) report(L, status);
    lua_close(L);   /* finalizers release every tensor */
    st_shutdown();  /* then the runtime's caches, so leak checkers see nothing */
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
