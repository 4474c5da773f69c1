/* plot.c: see plot.h. */
#include "bench/plot.h"
#include "base/hr_file.h"
#include "base/hr_log.h"
#include "bench/bench_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* gnuplot draws p->png as PNG.tmp.PID.TAG (hr_file_tmp_name), renamed over PNG once every plot
 * of the script is drawn: a failed or stopped gnuplot (which leaves an empty or partial file)
 * never replaces a plot */
static void tmp_png(const plot_spec *p, char *out, size_t n) {
    if (hr_file_tmp_name(out, n, p->png) != 0) snprintf(out, n, "%s", p->png);
}

static void write_plot(FILE *f, const plot_spec *p) {
    char tmp[PLOT_PATH + 32];
    tmp_png(p, tmp, sizeof tmp);
    fprintf(f, "set output ");
    put_quoted(f, tmp);
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

/* 0 when every series' CSV can be read; else -1 after a warning naming the first that cannot */
static int inputs_readable(const plot_spec *plots, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < plots[i].n_series; k++)
            if (access(plots[i].series[k].csv, R_OK) != 0) {
                HR_WARN(BENCH, "plots skipped: %s cannot be read (%s), so %s was not drawn",
                        plots[i].series[k].csv, strerror(errno), plots[i].png);
                return -1;
            }
    return 0;
}

/* Rename every drawn PNG over its name (ok), or remove them all (a failed gnuplot). */
static int finish_pngs(const plot_spec *plots, int n, int ok) {
    int rc = ok ? 0 : -1;
    for (int i = 0; i < n; i++) {
        char tmp[PLOT_PATH + 32];
        tmp_png(&plots[i], tmp, sizeof tmp);
        if (!ok) {
            unlink(tmp);
        } else if (hr_file_replace(tmp, plots[i].png) != 0) {
            HR_WARN(BENCH, "gnuplot did not write %s", plots[i].png);
            rc = -1;
        }
    }
    return rc;
}

int plot_render(const char *script, const plot_spec *plots, int n, const char *log) {
    if (inputs_readable(plots, n) != 0) return -1;
    /* what a killed run's gnuplot left (hr_file_create does the same for the CSVs) */
    for (int i = 0; i < n; i++) hr_file_remove_stale(plots[i].png, HR_SUB_BENCH, "plot");
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
    int rc = bench_spawn(argv, log, 1, 60);
    if (rc != 0) {
        finish_pngs(plots, n, 0);
        if (rc == -1 || rc == 127)
            HR_WARN(BENCH, "gnuplot is missing; plots skipped (%s)", script);
        else
            HR_WARN(BENCH, "gnuplot failed (exit %d); plots skipped, see %s (%s)", rc, log, script);
        return -1;
    }
    return finish_pngs(plots, n, 1);
}
