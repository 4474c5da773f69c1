/* plot.c: see plot.h. */
#include "bench/plot.h"
#include "base/hr_log.h"
#include "bench/bench_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void plot_add(plot_spec *p, const char *csv, int x, int y, double scale, const char *fmt, ...) {
    if (p->n_series >= PLOT_MAX_SERIES) return;
    plot_series *s = &p->series[p->n_series++];
    snprintf(s->csv, sizeof s->csv, "%s", csv);
    s->x = x;
    s->y = y;
    s->scale = scale;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->title, sizeof s->title, fmt, ap);
    va_end(ap);
}

/* gnuplot strings are single-quoted; a quote inside one is written twice */
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void write_plot(FILE *f, const plot_spec *p) {
    fprintf(f, "set output ");
    put_quoted(f, p->png);
    fprintf(f, "\nset title ");
    put_quoted(f, p->title);
    fprintf(f, "\nset xlabel ");
    put_quoted(f, p->xlabel ? p->xlabel : "");
    fprintf(f, "\nset ylabel ");
    put_quoted(f, p->ylabel ? p->ylabel : "");
    fprintf(f, "\nplot ");
    for (int i = 0; i < p->n_series; i++) {
        const plot_series *s = &p->series[i];
        fprintf(f, "%s", i ? ", " : "");
        put_quoted(f, s->csv);
        if (s->scale == 0 || s->scale == 1)
            fprintf(f, " using %d:%d with lines title ", s->x, s->y);
        else
            fprintf(f, " using %d:(%g*column(%d)) with lines title ", s->x, s->scale, s->y);
        put_quoted(f, s->title);
    }
    fprintf(f, "\n");
}

int plot_render(const char *script, const plot_spec *plots, int n, const char *log) {
    FILE *f = fopen(script, "w");
    if (!f) {
        HR_WARN(BENCH, "cannot write %s; plots skipped", script);
        return -1;
    }
    fprintf(f, "set datafile separator ','\nset terminal pngcairo size 900,300 font ',9'\n"
               "set key outside right\nset grid\n");
    for (int i = 0; i < n; i++) write_plot(f, &plots[i]);
    if (bench_close(f, script) != 0) {
        HR_WARN(BENCH, "plots skipped (%s)", script);
        return -1;
    }
    char *argv[] = {"gnuplot", (char *)script, NULL};
    if (bench_spawn(argv, log, 1, 60) != 0) {
        HR_WARN(BENCH, "gnuplot failed or is missing; plots skipped (%s)", script);
        return -1;
    }
    return 0;
}
