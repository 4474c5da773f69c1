/*
 * cfg_value.c: the value types of the schema: what each expects, how its text is parsed into a
 * field and how the field prints; and the paths that values written relative resolve against.
 */
#include "conf/cfg_internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each value type is a row of three small functions: what it expects (for messages and the
 * reference file), how its text is parsed into the field, and how the field prints. A parser
 * writes nothing to the field unless the whole value is good. */

/* Why a value was refused: the text of the value, what the key expects, and the caller's
 * buffer for the reason. */
typedef struct {
    const char *val; /* the value as written */
    const char *exp; /* what the key expects, e.g. "an integer in [1, 65535]" */
    char *why;       /* out: the reason the value is refused */
    size_t whylen;
} verdict;

static int refuse(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(verdict *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, v->whylen, fmt, ap);
    va_end(ap);
    return -1;
}

int cfg_parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (isspace((unsigned char)*end)) end++;
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int in_range(const key_spec *k, double v) {
    return v >= k->min && v <= k->max;
}

/* Split a comma-separated list in `buf` (modified) into its non-empty items, leading white
 * space trimmed. Returns the count, or -1 when there are more than `max`. */
static int split_list(char *buf, char **items, int max) {
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max) return -1;
        while (isspace((unsigned char)*tok)) tok++;
        items[n++] = tok;
    }
    return n;
}

/* The shortest text that reads back as the same double. */
static void format_double(double v, char *out, size_t n) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
}

/* ---------------------------------------------------------------- text */

static void str_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "%s", strcmp(k->key, "host") == 0 ? "a host name or IP address" : "text");
}

static void path_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n,
             "a path; relative to this file's directory (from --set or the environment: "
             "to the current directory)");
}

static int str_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    size_t len = strlen(v->val);
    if (len >= k->size)
        return refuse(v, "value is too long (expected at most %zu characters)", k->size - 1);
    memcpy(field, v->val, len + 1);
    return 0;
}

static void str_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%s", field);
}

/* ---------------------------------------------------------------- numbers */

static void int_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "an integer in [%.15g, %.15g]", k->min, k->max);
}

static int int_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    long x;
    if (cfg_parse_long(v->val, &x))
        return refuse(v, "malformed integer '%s' (expected %s)", v->val, v->exp);
    if (!in_range(k, (double)x)) return refuse(v, "%ld is out of range (expected %s)", x, v->exp);
    *(long *)field = x;
    return 0;
}

static void int_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%ld", *(const long *)field);
}

/* "auto" or an integer: with auto, the code that uses the key chooses its value */
static void autoint_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "auto or an integer in [%.15g, %.15g]", k->min, k->max);
}

static int autoint_parse(const key_spec *k, void *base, char *field, verdict *v) {
    if (strcmp(v->val, "auto") != 0) return int_parse(k, base, field, v);
    *(long *)field = CFG_AUTO;
    return 0;
}

static void autoint_format(const key_spec *k, const void *base, const char *field, char *out,
                           size_t n) {
    if (*(const long *)field == CFG_AUTO)
        snprintf(out, n, "auto");
    else
        int_format(k, base, field, out, n);
}

static void dbl_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "a number in [%.15g, %.15g]", k->min, k->max);
}

static int dbl_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    double x;
    if (parse_double(v->val, &x))
        return refuse(v, "malformed number '%s' (expected %s)", v->val, v->exp);
    if (!in_range(k, x)) return refuse(v, "%g is out of range (expected %s)", x, v->exp);
    *(double *)field = x;
    return 0;
}

static void dbl_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    format_double(*(const double *)field, out, n);
}

static void u64_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "an unsigned 64-bit integer");
}

static int u64_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)k, (void)base;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v->val, &end, 10); /* decimal: 010 is ten, not eight */
    if (errno || end == v->val || *end || v->val[0] == '-')
        return refuse(v, "malformed integer '%s' (expected %s)", v->val, v->exp);
    *(uint64_t *)field = (uint64_t)x;
    return 0;
}

static void u64_format(const key_spec *k, const void *base, const char *field, char *out,
                       size_t n) {
    (void)k, (void)base;
    snprintf(out, n, "%llu", (unsigned long long)*(const uint64_t *)field);
}

/* ---------------------------------------------------------------- enums: "a|b|c", value is the
 * index */

static void enum_expect(const key_spec *k, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "one of ");
    for (const char *p = k->choices; *p && o + 2 < n; p++) {
        if (*p == '|') {
            if (o + 2 < n) buf[o++] = ',', buf[o++] = ' ';
        } else {
            buf[o++] = *p;
        }
    }
    buf[o < n ? o : n - 1] = 0;
}

static int enum_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    size_t vlen = strlen(v->val);
    int idx = 0;
    for (const char *p = k->choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, v->val, len) == 0) {
            *(int *)field = idx;
            return 0;
        }
        p += len + (bar ? 1 : 0);
    }
    return refuse(v, "unknown value '%s' (expected %s)", v->val, v->exp);
}

static void enum_format(const key_spec *k, const void *base, const char *field, char *out,
                        size_t n) {
    (void)base;
    int idx = *(const int *)field;
    const char *p = k->choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    const char *bar = p ? strchr(p, '|') : NULL;
    snprintf(out, n, "%.*s", p ? (int)(bar ? (size_t)(bar - p) : strlen(p)) : 0, p ? p : "");
}

/* ---------------------------------------------------------------- lists */

static void layers_expect(const key_spec *k, char *buf, size_t n) {
    snprintf(buf, n, "2 to %d comma-separated widths in [1, %.0f]", CFG_MAX_LAYERS, k->max);
}

static int layers_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)base;
    char buf[512], *item[CFG_MAX_LAYERS];
    long tmp[CFG_MAX_LAYERS];
    snprintf(buf, sizeof buf, "%s", v->val);
    int n = split_list(buf, item, CFG_MAX_LAYERS), ok = n >= 2;
    for (int i = 0; i < n && ok; i++)
        ok = cfg_parse_long(item[i], &tmp[i]) == 0 && in_range(k, (double)tmp[i]);
    if (!ok) return refuse(v, "bad layer list '%s' (expected %s)", v->val, v->exp);
    memcpy(field, tmp, sizeof tmp);
    /* n_layers follows layers[] directly in cfg */
    *(int *)(field + sizeof(long) * CFG_MAX_LAYERS) = n;
    return 0;
}

static void layers_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)base;
    const long *l = (const long *)field;
    int cnt = *(const int *)(field + sizeof(long) * CFG_MAX_LAYERS);
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < cnt && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%ld", i ? "," : "", l[i]);
}

static void phases_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "up to %d ITER:FACTOR pairs with ascending ITER and FACTOR in [1, 1000]",
             CFG_MAX_PHASES);
}

/* One "ITER:FACTOR" item of an interference schedule, after the phase `prev` (NULL first). */
static int parse_phase(const key_spec *k, char *item, const cfg_phase *prev, cfg_phase *out) {
    char *colon = strchr(item, ':');
    if (!colon) return -1;
    *colon = 0;
    return cfg_parse_long(item, &out->iter) || out->iter < 0 ||
                   parse_double(colon + 1, &out->factor) || !in_range(k, out->factor) ||
                   (prev && out->iter <= prev->iter)
               ? -1
               : 0;
}

static int phases_parse(const key_spec *k, void *base, char *field, verdict *v) {
    char buf[512], *item[CFG_MAX_PHASES];
    cfg_phase tmp[CFG_MAX_PHASES];
    snprintf(buf, sizeof buf, "%s", v->val);
    int n = split_list(buf, item, CFG_MAX_PHASES), ok = n >= 0;
    for (int i = 0; i < n && ok; i++)
        ok = parse_phase(k, item[i], i ? &tmp[i - 1] : NULL, &tmp[i]) == 0;
    if (!ok) return refuse(v, "bad interference schedule '%s' (expected %s)", v->val, v->exp);
    memcpy(field, tmp, sizeof tmp);
    ((cfg_node *)base)->n_interference = n;
    return 0;
}

static void phases_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)field;
    const cfg_node *node = base;
    char factor[32];
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < node->n_interference && o < n; i++) {
        format_double(node->interference[i].factor, factor, sizeof factor);
        o += (size_t)snprintf(out + o, n - o, "%s%ld:%s", i ? "," : "", node->interference[i].iter,
                              factor);
    }
}

/* ---------------------------------------------------------------- keys and devices */

int cfg_hex_decode(const char *hex, uint8_t *out, size_t n) {
    if (strlen(hex) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char ch = (char)tolower((unsigned char)hex[2 * i + (size_t)j]);
            if (ch >= '0' && ch <= '9')
                v = v * 16 + (unsigned)(ch - '0');
            else if (ch >= 'a' && ch <= 'f')
                v = v * 16 + (unsigned)(ch - 'a' + 10);
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

void cfg_hex_encode(const uint8_t *in, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = 0;
}

/* What cfg_print writes in place of a secret key. It does not parse as a key: a printed
 * configuration with an inline secret reads back only once the secret is given again. */
#define REDACTED "<redacted>"

static void hexkey_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%d hex digits", 2 * CFG_KEYLEN);
}

/* T_HEXKEY keys are optional: `size` is the offset of the flag that says the key was given. */
static int *hexkey_flag(const key_spec *k, void *base) {
    return (int *)((char *)base + k->size);
}
static int hexkey_given(const key_spec *k, const void *base) {
    return *(const int *)((const char *)base + k->size);
}

static int hexkey_parse(const key_spec *k, void *base, char *field, verdict *v) {
    uint8_t key[CFG_KEYLEN];
    if (k->secret && strcmp(v->val, REDACTED) == 0)
        return refuse(v,
                      "the key was redacted when this configuration was printed (expected %s: "
                      "give the key again, or remove this line and set psk_file or "
                      "HETRING_CLUSTER_PSK)",
                      v->exp);
    if (cfg_hex_decode(v->val, key, CFG_KEYLEN)) /* never echo a key value: it may be secret */
        return refuse(v, "malformed key (expected %s)", v->exp);
    memcpy(field, key, CFG_KEYLEN);
    *hexkey_flag(k, base) = 1;
    memset(key, 0, sizeof key);
    return 0;
}

static void hexkey_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    if (!hexkey_given(k, base))
        snprintf(out, n, "%s", "");
    else if (k->secret)
        snprintf(out, n, REDACTED);
    else if (n > 2 * CFG_KEYLEN)
        cfg_hex_encode((const uint8_t *)field, CFG_KEYLEN, out);
}

static void device_expect(const key_spec *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "cpu or cuda:N");
}

static int device_parse(const key_spec *k, void *base, char *field, verdict *v) {
    (void)k, (void)base;
    long d;
    if (strcmp(v->val, "cpu") == 0)
        d = -1;
    else if (strncmp(v->val, "cuda:", 5) != 0 || cfg_parse_long(v->val + 5, &d) || d < 0 || d >= 64)
        return refuse(v, "unknown device '%s' (expected %s)", v->val, v->exp);
    *(long *)field = d;
    return 0;
}

static void device_format(const key_spec *k, const void *base, const char *field, char *out,
                          size_t n) {
    (void)k, (void)base;
    long d = *(const long *)field;
    if (d < 0)
        snprintf(out, n, "cpu");
    else
        snprintf(out, n, "cuda:%ld", d);
}

/* ---------------------------------------------------------------- paths */

/* A T_PATH value written relative is taken relative to `base`, an absolute directory: the INI
 * file's for values from the file, the current one for overrides. The field then holds an
 * absolute path, so the configuration means the same files from any working directory, and
 * what cfg_print writes reads back the same from anywhere. An empty value (unset) stays
 * empty; "{id}" in key_file is expanded later and survives. */
int cfg_resolve_path(const char *base, char *field, size_t size, char *why, size_t whylen) {
    if (!field[0] || field[0] == '/') return 0;
    const char *rel = field;
    while (rel[0] == '.' && rel[1] == '/') /* "./x" is "x" */
        for (rel += 2; *rel == '/';) rel++;
    char joined[PATH_MAX + CFG_PATH];
    int n = snprintf(joined, sizeof joined, "%s%s%s", base,
                     base[0] && base[strlen(base) - 1] == '/' ? "" : "/", rel);
    if (n < 0 || (size_t)n >= size) {
        snprintf(why, whylen, "'%s' relative to %s is too long (expected at most %zu characters)",
                 field, base, size - 1);
        return -1;
    }
    memcpy(field, joined, (size_t)n + 1);
    return 0;
}

/* The absolute directory of `file` (the file need not be named absolutely) into `out`, which
 * holds PATH_MAX bytes (realpath's size). */
void cfg_dir_of(const char *file, char *out, size_t n) {
    char dir[PATH_MAX];
    const char *slash = strrchr(file, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == file ? 1 : (int)(slash - file), file);
    if (!realpath(dir, out)) snprintf(out, n, "%s", dir);
}

/* The current directory, for overrides. */
void cfg_current_dir(char *out, size_t n) {
    if (!getcwd(out, n)) snprintf(out, n, ".");
}

/* ---------------------------------------------------------------- the table */

typedef struct {
    void (*expect)(const key_spec *k, char *buf, size_t n);
    int (*parse)(const key_spec *k, void *base, char *field, verdict *v);
    void (*format)(const key_spec *k, const void *base, const char *field, char *out, size_t n);
} value_type;

static const value_type value_types[] = {
    [T_STR] = {str_expect, str_parse, str_format},
    [T_PATH] = {path_expect, str_parse, str_format},
    [T_INT] = {int_expect, int_parse, int_format},
    [T_AUTOINT] = {autoint_expect, autoint_parse, autoint_format},
    [T_DBL] = {dbl_expect, dbl_parse, dbl_format},
    [T_ENUM] = {enum_expect, enum_parse, enum_format},
    [T_U64] = {u64_expect, u64_parse, u64_format},
    [T_LAYERS] = {layers_expect, layers_parse, layers_format},
    [T_HEXKEY] = {hexkey_expect, hexkey_parse, hexkey_format},
    [T_DEVICE] = {device_expect, device_parse, device_format},
    [T_PHASES] = {phases_expect, phases_parse, phases_format},
};

/* What key `k` expects, for messages and the reference file. */
void cfg_expected(const key_spec *k, char *buf, size_t n) {
    value_types[k->type].expect(k, buf, n);
}

/* Parse `val` into the field of `k` inside `base`. On failure write the reason to `why`. */
int cfg_value_set(const key_spec *k, void *base, const char *val, char *why, size_t whylen) {
    char exp[256];
    cfg_expected(k, exp, sizeof exp);
    verdict v = {.val = val, .exp = exp, .why = why, .whylen = whylen};
    return value_types[k->type].parse(k, base, (char *)base + k->off, &v);
}

/* Is an optional key (a T_HEXKEY) unset? Every other key always has a value. */
int cfg_value_unset(const key_spec *k, const void *base) {
    return k->type == T_HEXKEY && !hexkey_given(k, base);
}

/* Text of a field's current value, for printing. */
void cfg_value_format(const key_spec *k, const void *base, char *out, size_t n) {
    value_types[k->type].format(k, base, (const char *)base + k->off, out, n);
}
