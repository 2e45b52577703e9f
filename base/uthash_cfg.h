/*
 * uthash_cfg.h — internal: uthash configured for stitch. Include this instead of <uthash.h>.
 *
 * uthash allocates through st_malloc and must never exit(): with HASH_NONFATAL_OOM a failed
 * allocation rolls the add back and calls uthash_nonfatal_oom, which sets base_hash_oom. A caller
 * clears base_hash_oom before an add and turns a set flag into ST_ERR_OOM (st_malloc has already
 * set the message).
 */
#ifndef ST_UTHASH_CFG_H
#define ST_UTHASH_CFG_H

#include "base/base.h"

ST_INTERNAL extern int base_hash_oom;
#define uthash_malloc(sz) st_malloc(sz)
#define uthash_free(ptr, sz) st_free(ptr)
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) do { (void)(obj); base_hash_oom = 1; } while (0)
#define uthash_fatal(msg) do { base_hash_oom = 1; } while (0)
#include <uthash.h>

#endif
