/*
 * cfg_value.c: the value types of the schema, one table with a row per type: what a key of the
 * type expects, how its text is parsed and checked, and how its field prints. Adding a value
 * type is its functions and one row of value_types[].
 *
 * A value goes from its text to its field in three steps, so that nothing is written to the
 * field unless the whole value is good: the type's parse turns the text into a `value` (the
 * bytes the field will hold), its check judges that value against the key (range, length, a
 * path made absolute), and only then are the bytes copied over the field.
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

/* A value on its way between its text and its field. Each member has the layout of its field
 * in cfg or cfg_node together with the count or flag that follows the field there (checked
 * below), so that a value moves in and out of its field by copying its first `width` bytes. */
typedef union {
    char text[CFG_PATH]; /* T_STR, T_HOST, T_PATH: the string and its NUL */
    long l;              /* T_INT, T_AUTOINT (CFG_AUTO for auto), T_DEVICE (-1 for cpu) */
    double d;            /* T_DBL */
    uint64_t u;          /* T_U64 */
    int e;               /* T_ENUM: index into the key's choices */
    struct {
        long w[CFG_MAX_LAYERS]; /* widths, input first */
        int n;                  /* entries used: n_layers follows layers[] */
    } layers;                   /* T_LAYERS */
    struct {
        cfg_phase p[CFG_MAX_PHASES]; /* ascending iter */
        int n;                       /* entries used: n_interference follows interference[] */
    } phases;                        /* T_PHASES */
    struct {
        uint8_t b[CFG_KEYLEN]; /* the key */
        int given;             /* has_psk and has_pubkey follow their key */
    } key;                     /* T_HEXKEY */
} value;

#define UPTO(m) (offsetof(value, m) + sizeof(int)) /* width of a value whose last int is m */

_Static_assert(offsetof(cfg, n_layers) - offsetof(cfg, layers) == offsetof(value, layers.n),
               "n_layers must follow layers[]");
_Static_assert(offsetof(cfg_node, n_interference) - offsetof(cfg_node, interference) ==
                   offsetof(value, phases.n),
               "n_interference must follow interference[]");
_Static_assert(offsetof(cfg, has_psk) - offsetof(cfg, psk) == offsetof(value, key.given),
               "has_psk must follow psk");
_Static_assert(offsetof(cfg_node, has_pubkey) - offsetof(cfg_node, pubkey) ==
                   offsetof(value, key.given),
               "has_pubkey must follow pubkey");
_Static_assert(CFG_KEYLEN == 32, "hexkey's expect text says 64 hex digits");

/* Why a value was refused: its text, what the key expects, where relative paths start, and
 * the caller's buffer for the reason. */
typedef struct {
    const char *val; /* the value as written */
    const char *exp; /* what the key expects, e.g. "an integer in [1, 65535]" */
    const char *dir; /* absolute directory relative T_PATH values start from; NULL: defaults */
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

/* ---------------------------------------------------------------- text and paths */

/* Copied as is; too long a text is refused by text_check, with the length it may have. */
static int text_parse(const key_spec *k, const char *s, value *out) {
    snprintf(out->text, sizeof out->text, "%s", s);
    return 0;
}

static int text_check(const key_spec *k, value *val, verdict *v) {
    if (strlen(v->val) < k->size) return 0;
    return refuse(v, "value is too long (expected at most %zu characters)", k->size - 1);
}

static void text_format(const key_spec *k, const value *val, char *out, size_t n) {
    snprintf(out, n, "%s", val->text);
}

/* ---------------------------------------------------------------- paths */

/* A T_PATH value written relative is taken relative to `base`, an absolute directory: the INI
 * file's for values from the file, the current one for overrides. The field then holds an
 * absolute path, so the configuration means the same files from any working directory, and
 * what cfg_print writes reads back the same from anywhere. An empty value (unset) stays
 * empty; "{id}" in key_file is expanded later and survives. */
static int resolve_path(const char *base, char *field, size_t size, char *why, size_t whylen) {
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

static int path_check(const key_spec *k, value *val, verdict *v) {
    if (text_check(k, val, v)) return -1;
    return v->dir ? resolve_path(v->dir, val->text, k->size, v->why, v->whylen) : 0;
}

/* ---------------------------------------------------------------- numbers */

static int int_parse(const key_spec *k, const char *s, value *out) {
    return cfg_parse_long(s, &out->l);
}

static int int_check(const key_spec *k, value *val, verdict *v) {
    if (in_range(k, (double)val->l)) return 0;
    return refuse(v, "%ld is out of range (expected %s)", val->l, v->exp);
}

static void int_format(const key_spec *k, const value *val, char *out, size_t n) {
    snprintf(out, n, "%ld", val->l);
}

/* "auto" or an integer: with auto, the code that uses the key chooses its value */
static int autoint_parse(const key_spec *k, const char *s, value *out) {
    if (strcmp(s, "auto") != 0) return int_parse(k, s, out);
    out->l = CFG_AUTO;
    return 0;
}

static int autoint_check(const key_spec *k, value *val, verdict *v) {
    return strcmp(v->val, "auto") == 0 ? 0 : int_check(k, val, v);
}

static void autoint_format(const key_spec *k, const value *val, char *out, size_t n) {
    if (val->l == CFG_AUTO)
        snprintf(out, n, "auto");
    else
        int_format(k, val, out, n);
}

static int dbl_parse(const key_spec *k, const char *s, value *out) {
    return parse_double(s, &out->d);
}

static int dbl_check(const key_spec *k, value *val, verdict *v) {
    if (in_range(k, val->d)) return 0;
    return refuse(v, "%g is out of range (expected %s)", val->d, v->exp);
}

static void dbl_format(const key_spec *k, const value *val, char *out, size_t n) {
    format_double(val->d, out, n);
}

static int u64_parse(const key_spec *k, const char *s, value *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10); /* decimal: 010 is ten, not eight */
    if (errno || end == s || *end || s[0] == '-') return -1;
    out->u = (uint64_t)x;
    return 0;
}

static void u64_format(const key_spec *k, const value *val, char *out, size_t n) {
    snprintf(out, n, "%llu", (unsigned long long)val->u);
}

/* ---------------------------------------------------------------- enums: "a|b|c", value is the
 * index */

/* "a, b, c" from the key's "a|b|c", after what `buf` holds already (o characters). */
static void choices_expect(const key_spec *k, char *buf, size_t n, size_t o) {
    for (const char *p = k->choices; *p && o + 2 < n; p++) {
        if (*p == '|') {
            if (o + 2 < n) buf[o++] = ',', buf[o++] = ' ';
        } else {
            buf[o++] = *p;
        }
    }
    buf[o < n ? o : n - 1] = 0;
}

static int enum_parse(const key_spec *k, const char *s, value *out) {
    size_t vlen = strlen(s);
    int idx = 0;
    for (const char *p = k->choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, s, len) == 0) {
            out->e = idx;
            return 0;
        }
        p += len + (bar ? 1 : 0);
    }
    return -1;
}

static void enum_format(const key_spec *k, const value *val, char *out, size_t n) {
    const char *p = k->choices;
    for (int i = 0; i < val->e && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    const char *bar = p ? strchr(p, '|') : NULL;
    snprintf(out, n, "%.*s", p ? (int)(bar ? (size_t)(bar - p) : strlen(p)) : 0, p ? p : "");
}

/* ---------------------------------------------------------------- lists */

static int layers_parse(const key_spec *k, const char *s, value *out) {
    char buf[512], *item[CFG_MAX_LAYERS];
    snprintf(buf, sizeof buf, "%s", s);
    int n = split_list(buf, item, CFG_MAX_LAYERS), ok = n >= 2;
    for (int i = 0; i < n && ok; i++)
        ok = cfg_parse_long(item[i], &out->layers.w[i]) == 0 &&
             in_range(k, (double)out->layers.w[i]);
    out->layers.n = n;
    return ok ? 0 : -1;
}

static void layers_format(const key_spec *k, const value *val, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < val->layers.n && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%ld", i ? "," : "", val->layers.w[i]);
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

static int phases_parse(const key_spec *k, const char *s, value *out) {
    char buf[512], *item[CFG_MAX_PHASES];
    cfg_phase *p = out->phases.p;
    snprintf(buf, sizeof buf, "%s", s);
    int n = split_list(buf, item, CFG_MAX_PHASES), ok = n >= 0;
    for (int i = 0; i < n && ok; i++)
        ok = parse_phase(k, item[i], i ? &p[i - 1] : NULL, &p[i]) == 0;
    out->phases.n = n;
    return ok ? 0 : -1;
}

static void phases_format(const key_spec *k, const value *val, char *out, size_t n) {
    char factor[32];
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < val->phases.n && o < n; i++) {
        format_double(val->phases.p[i].factor, factor, sizeof factor);
        o += (size_t)snprintf(out + o, n - o, "%s%ld:%s", i ? "," : "", val->phases.p[i].iter,
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

/* Never echoed when refused (its row hides the text): a key value may be secret. */
static int hexkey_parse(const key_spec *k, const char *s, value *out) {
    if (cfg_hex_decode(s, out->key.b, CFG_KEYLEN)) return -1;
    out->key.given = 1;
    return 0;
}

static void hexkey_format(const key_spec *k, const value *val, char *out, size_t n) {
    if (!val->key.given)
        snprintf(out, n, "%s", "");
    else if (k->secret)
        snprintf(out, n, REDACTED);
    else if (n > 2 * CFG_KEYLEN)
        cfg_hex_encode(val->key.b, CFG_KEYLEN, out);
}

static int device_parse(const key_spec *k, const char *s, value *out) {
    long d;
    if (strcmp(s, "cpu") == 0)
        d = -1;
    else if (strncmp(s, "cuda:", 5) != 0 || cfg_parse_long(s + 5, &d) || d < 0 || d >= 64)
        return -1;
    out->l = d;
    return 0;
}

static void device_format(const key_spec *k, const value *val, char *out, size_t n) {
    if (val->l < 0)
        snprintf(out, n, "cpu");
    else
        snprintf(out, n, "cuda:%ld", val->l);
}

/* ---------------------------------------------------------------- the table */

/* What follows a type's expect text: nothing, the key's range or the key's choices. */
enum { PLAIN, RANGE, CHOICES };

typedef struct {
    const char *expect; /* what a key of the type expects, for messages and the reference file */
    int tail;           /* PLAIN, RANGE (" in [min, max]" of the key) or CHOICES (the key's) */
    const char *what;   /* a text that does not parse is refused as "WHAT 'TEXT' (expected ...)" */
    int hide;           /* 1: as "WHAT (expected ...)", the text not echoed (it may be secret) */
    size_t width;       /* bytes of the value in its field, the count or flag after it included;
                         * 0: a string and its NUL */
    int (*parse)(const key_spec *k, const char *s, value *out); /* 0, or -1: malformed */
    int (*check)(const key_spec *k, value *val, verdict *v);    /* 0, or refuses; NULL: none */
    void (*format)(const key_spec *k, const value *val, char *out, size_t n);
} value_type;

#define STR_(x) #x
#define STR(x)  STR_(x)

static const value_type value_types[] = {
    [T_STR] = {"text", PLAIN, NULL, 0, 0, text_parse, text_check, text_format},
    [T_HOST] = {"a host name or IP address", PLAIN, NULL, 0, 0, text_parse, text_check,
                text_format},
    [T_PATH] = {"a path; relative to this file's directory (from --set or the environment: to "
                "the current directory)",
                PLAIN, NULL, 0, 0, text_parse, path_check, text_format},
    [T_INT] = {"an integer", RANGE, "malformed integer", 0, sizeof(long), int_parse, int_check,
               int_format},
    [T_AUTOINT] = {"auto or an integer", RANGE, "malformed integer", 0, sizeof(long), autoint_parse,
                   autoint_check, autoint_format},
    [T_DBL] = {"a number", RANGE, "malformed number", 0, sizeof(double), dbl_parse, dbl_check,
               dbl_format},
    [T_ENUM] = {"one of", CHOICES, "unknown value", 0, sizeof(int), enum_parse, NULL, enum_format},
    [T_U64] = {"an unsigned 64-bit integer", PLAIN, "malformed integer", 0, sizeof(uint64_t),
               u64_parse, NULL, u64_format},
    [T_LAYERS] = {"2 to " STR(CFG_MAX_LAYERS) " comma-separated widths", RANGE, "bad layer list", 0,
                  UPTO(layers.n), layers_parse, NULL, layers_format},
    [T_HEXKEY] = {"64 hex digits", PLAIN, "malformed key", 1, UPTO(key.given), hexkey_parse, NULL,
                  hexkey_format},
    [T_DEVICE] = {"cpu or cuda:N", PLAIN, "unknown device", 0, sizeof(long), device_parse, NULL,
                  device_format},
    [T_PHASES] = {"up to " STR(CFG_MAX_PHASES) " ITER:FACTOR pairs with ascending ITER and FACTOR",
                  RANGE, "bad interference schedule", 0, UPTO(phases.n), phases_parse, NULL,
                  phases_format},
};

void cfg_expected(const key_spec *k, char *buf, size_t n) {
    const value_type *t = &value_types[k->type];
    if (t->tail == RANGE)
        snprintf(buf, n, "%s in [%.15g, %.15g]", t->expect, k->min, k->max);
    else if (t->tail == CHOICES)
        choices_expect(k, buf, n, (size_t)snprintf(buf, n, "%s ", t->expect));
    else
        snprintf(buf, n, "%s", t->expect);
}

/* Bytes of the value in the field at `field`. */
static size_t width(const key_spec *k, const char *field) {
    size_t w = value_types[k->type].width;
    return w ? w : strlen(field) + 1;
}

/* The value's text, parsed and checked into `val`; 0, or -1 with the reason in v->why. */
static int parse_value(const key_spec *k, value *val, verdict *v) {
    const value_type *t = &value_types[k->type];
    if (k->secret && strcmp(v->val, REDACTED) == 0)
        return refuse(v,
                      "the key was redacted when this configuration was printed (expected %s: "
                      "give the key again, or remove this line and set psk_file or "
                      "HETRING_CLUSTER_PSK)",
                      v->exp);
    if (t->parse(k, v->val, val) != 0)
        return t->hide ? refuse(v, "%s (expected %s)", t->what, v->exp)
                       : refuse(v, "%s '%s' (expected %s)", t->what, v->val, v->exp);
    return t->check ? t->check(k, val, v) : 0;
}

int cfg_value_set(const key_spec *k, void *base, const char *text, const char *dir, char *why,
                  size_t whylen) {
    char exp[256];
    cfg_expected(k, exp, sizeof exp);
    verdict v = {.val = text, .exp = exp, .dir = dir, .why = why, .whylen = whylen};
    value val;
    memset(&val, 0, sizeof val);
    int rc = parse_value(k, &val, &v);
    if (rc == 0) memcpy((char *)base + k->off, &val, width(k, val.text));
    memset(&val, 0, sizeof val); /* it may hold a secret key */
    return rc;
}

int cfg_value_unset(const key_spec *k, const void *base) {
    if (k->type != T_HEXKEY) return 0;
    return !*(const int *)((const char *)base + k->off + offsetof(value, key.given));
}

void cfg_value_format(const key_spec *k, const void *base, char *out, size_t n) {
    const char *field = (const char *)base + k->off;
    value val;
    memcpy(&val, field, width(k, field));
    value_types[k->type].format(k, &val, out, n);
    memset(&val, 0, sizeof val); /* it may hold a secret key */
}
