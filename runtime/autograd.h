/*
 * autograd.h — internal to runtime/: what the backward walk (autograd.c) and the gradient rules
 * (grad.c) share.
 *
 * A rule is grad_<f> for the GRAD(f) column of trace/ops.def: given the gradient g of a node that
 * requires grad, it records (with the public tensor ops) the gradient of each of the node's srcs
 * that requires grad into d[]. Its temporaries go to an arena released after the rule, so a rule
 * never releases anything itself; the first failure is kept in the arena.
 */
#ifndef ST_AUTOGRAD_H
#define ST_AUTOGRAD_H

#include "runtime/tensor.h"

typedef struct st_ag_fn st_ag_fn;

#define GRAD_ARENA_MAX 256   /* an overlapping view's rule: a few per window tap (grad.c) */
typedef struct grad_arena {
    st_tensor *t[GRAD_ARENA_MAX];
    int n;
    st_status status;
    char msg[512];
} grad_arena;

typedef struct grad_ctx {
    grad_arena *A;
    st_node *n;                /* the node whose gradient is g */
    const st_ag *ag;           /* its record: op, arg, its own references to its srcs */
    st_node *s0, *s1;          /* ag->src[0], ag->src[1] (NULL when it has one src) */
    st_tensor *g;              /* n's gradient (borrowed) */
    st_tensor *x, *y, *out;    /* handles on src 0, src 1 and n when the op's READS column is set */
    st_tensor *d[ST_NODE_SRCS];           /* the rule's answer: each src's gradient (NULL when it needs none) */
} grad_ctx;

/* Applies n's rule to its gradient g and adds each answer to its src's pending gradient. */
ST_INTERNAL void grad_apply(grad_arena *A, st_node *n, st_tensor *g);
ST_INTERNAL void grad_arena_free(grad_arena *A);
/* Custom functions (autograd_fn.c): st_ag_fn_park hands the gradient g (borrowed) of an AG_FN_OUT
 * node to its function; st_ag_fn_run runs an AG_FN node's backward on what was parked and adds the
 * answers to its inputs' pending gradients; st_ag_fn_clear drops what is parked. */
ST_INTERNAL void st_ag_fn_park(st_node *out, st_tensor *g);
ST_INTERNAL st_status st_ag_fn_run(st_node *n);
ST_INTERNAL void st_ag_fn_clear(st_ag_fn *f);
ST_INTERNAL void st_ag_fn_release(st_ag_fn *f);
/* Installs autograd's hooks in the trace (autograd.c): before the first record is made. */
ST_INTERNAL void st_ag_register_hooks(void);
/* A new node with t's value (its view, its dtype) that nobody else holds and that carries no
 * record (autograd.c). New reference, or NULL on failure. */
ST_INTERNAL st_node *st_ag_fresh_read(st_tensor *t);
/* A node reading t (its view, dtype dt) that carries no autograd record (autograd.c). */
ST_INTERNAL st_node *st_ag_detached_read(st_tensor *t, st_dtype dt);

#endif
