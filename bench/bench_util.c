/* bench_util.c: see bench_util.h. */
#include "bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *find_key(const char *line, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    return *p == ':' ? p + 1 : NULL;
}

int json_number(const char *line, const char *key, double *out) {
    const char *p = find_key(line, key);
    if (!p) return -1;
    char *end;
    double v = strtod(p, &end);
    if (end == p) {
        while (*p == ' ') p++;
        if (strncmp(p, "true", 4) == 0)
            v = 1;
        else if (strncmp(p, "false", 5) == 0)
            v = 0;
        else
            return -1;
    }
    *out = v;
    return 0;
}

int json_array(const char *line, const char *key, double *out, int max) {
    const char *p = find_key(line, key);
    if (!p) return 0;
    while (*p == ' ') p++;
    if (*p++ != '[') return 0;
    int n = 0;
    while (n < max) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        out[n++] = v;
        p = end;
        while (*p == ' ') p++;
        if (*p != ',') break;
        p++;
    }
    return n;
}

int list_has(const char *list, const char *item) {
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, item, n) == 0) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
