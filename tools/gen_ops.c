/*
 * gen_ops.c — prints docs/ops.md, the table of the public elementwise functions, from the API rows
 * of trace/ops.def (and each primitive's dtype rule and gradient from its op row).
 *
 * A host tool of the build, not part of the library: `make docs` writes docs/ops.md with it, and
 * the test suite (check_ops) fails when the committed page differs from what the table says.
 */
#include <stdio.h>
#include <string.h>

#define GRAD(f) 1
#define NOGRAD 0
static const struct { const char *name, *dtype; int diff; } prims[] = {
#define X(NAME, KIND, NSRC, STR, MATH, DTYPE, COST, GRAD_, READS) {#NAME, #DTYPE, GRAD_},
#include "trace/ops.def"
#undef X
};

static const char *rule_words(const char *dt) {
    static const struct { const char *rule, *words; } w[] = {
        {"DT_SAME", "the inputs' (promoted)"},
        {"DT_NUMERIC", "the inputs'; bool is refused"},
        {"DT_FLOAT", "the inputs' when float, else f32"},
        {"DT_NOBOOL", "the inputs' (promoted); bool computes in i64"},
        {"DT_TO_BOOL", "bool"},
        {"DT_LOGIC", "bool (inputs read as bool)"},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(w[i].rule, dt)) return w[i].words;
    return "see the function";
}

static void row(const char *name, int arity, const char *op, const char *doc) {
    const char *dt = NULL;
    int diff = 1;
    for (size_t i = 0; op && i < sizeof prims / sizeof prims[0]; i++)
        if (!strcmp(prims[i].name, op)) {
            dt = prims[i].dtype;
            diff = prims[i].diff;
        }
    printf("| `st_%s(%s)` | `%s:%s(%s)` | %s | %s | %s |\n", name, arity == 1 ? "a" : "a, b", arity == 1 ? "x" : "a",
           name, arity == 1 ? "" : "b", op ? rule_words(dt) : "as the ops it is made of", diff ? "yes" : "no", doc);
}

int main(void) {
    puts("# Elementwise functions");
    puts("");
    puts("<!-- generated from trace/ops.def by tools/gen_ops.c (`make docs`); do not edit: the test");
    puts("     suite fails when this page and the table differ -->");
    puts("");
    puts("One row of `trace/ops.def` per function. Each is `st_<name>` in C (`include/stitch.h`), a");
    puts("method and a module function in Lua (`x:exp()`, `st.exp(x)`; binary ones take a tensor or a");
    puts("number on either side), broadcasting and promoting as [api.md](api.md) says. *Result dtype*");
    puts("is the dtype of the result from the inputs' promoted dtype; *gradient*: whether gradients");
    puts("flow through it ([autograd.md](autograd.md)). Every function gives the same bits on the CPU");
    puts("and on a GPU; its accuracy is in [api.md](api.md#numerics).");
    puts("");
    puts("| C | Lua | result dtype | gradient | what |");
    puts("| --- | --- | --- | --- | --- |");
#define API_DOC(REF, DA, DB, BOUND, FLAGS, DOC) DOC
#define API(name, ARITY, OP, ...) row(#name, ARITY, #OP, API_DOC(__VA_ARGS__));
#define APIC(name, ARITY, ...) row(#name, ARITY, NULL, API_DOC(__VA_ARGS__));
#include "trace/ops.def"
    return 0;
}
