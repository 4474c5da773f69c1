/*
 * plot.h: line plots of CSV columns as PNG files, the one place the bench suite draws.
 *
 * A plot is described by a struct (file, title, axis labels, one series per line) rather than
 * by a script's positional arguments. plot_render writes every plot of a figure set into one
 * gnuplot script and runs gnuplot on it; where gnuplot is missing or fails it warns once and
 * the bench goes on without plots. Every plot has the bench's look: 900x300 pixels, key
 * outside on the right, grid, comma-separated data with a header line.
 */
#ifndef HR_PLOT_H
#define HR_PLOT_H

#define PLOT_MAX_SERIES 8
#define PLOT_PATH       1024

/* One line of a plot: column `y` (times `scale`) of `csv` against column `x`. */
typedef struct {
    char csv[PLOT_PATH]; /* CSV file, first line a header */
    int x;               /* column for x, 1-based */
    int y;               /* column for y, 1-based */
    double scale;        /* y is multiplied by this (0 counts as 1) */
    char title[64];      /* legend entry */
} plot_series;

typedef struct {
    char png[PLOT_PATH];                 /* file to write */
    char title[200];                     /* plot title */
    const char *xlabel;                  /* x axis label */
    const char *ylabel;                  /* y axis label */
    plot_series series[PLOT_MAX_SERIES]; /* the lines, drawn in order */
    int n_series;                        /* entries used in series[] */
} plot_spec;

/* Add a line to `p` (silently ignored beyond PLOT_MAX_SERIES); the title is printf-style. */
void plot_add(plot_spec *p, const char *csv, int x, int y, double scale, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Write plots[0..n) as the gnuplot script `script` and run gnuplot on it, its stderr appended
 * to `log`. Each PNG is drawn beside its name and renamed over it once gnuplot succeeded, so a
 * PNG is whole or as it was. A series' CSV that cannot be read is named in a warning and
 * nothing is drawn. Returns 0 when every PNG was drawn, -1 after a warning otherwise. */
int plot_render(const char *script, const plot_spec *plots, int n, const char *log);

#endif
