/*
 * hr_addr.h: a node's address as users write it in messages: HOST:PORT, and [HOST]:PORT for an
 * IPv6 address, whose colons would otherwise run into the port's (::1:29400).
 */
#ifndef HR_ADDR_H
#define HR_ADDR_H

#include <stdio.h>
#include <string.h>

#define HR_ADDR_LEN 300 /* a host name of up to 255 bytes, brackets, a port */

/* HOST:PORT (or [HOST]:PORT) into out[n]; returns out, for use inside a message. */
static inline const char *hr_addr(char *out, size_t n, const char *host, long port) {
    if (strchr(host, ':'))
        snprintf(out, n, "[%s]:%ld", host, port);
    else
        snprintf(out, n, "%s:%ld", host, port);
    return out;
}

/* Whether two addresses as hr_addr writes them have the same host: the same bytes up to the
 * colon before the port (127.0.0.1:9 and 127.0.0.12:9 do not; [::1]:9 and [::1]:10 do). */
static inline int hr_addr_same_host(const char *a, const char *b) {
    const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
    size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
    return la == lb && memcmp(a, b, la) == 0;
}

#endif
