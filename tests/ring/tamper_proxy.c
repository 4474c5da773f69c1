/*
 * tamper_proxy.c: a man in the middle for the tampering test.
 *
 *   tamper_proxy LISTEN_PORT TARGET_PORT flip[-FIELD]|truncate|replay K
 *
 * Accepts one connection on 127.0.0.1:LISTEN_PORT (from the initiating node), connects to
 * 127.0.0.1:TARGET_PORT and relays both ways. In the initiator-to-responder direction it skips
 * the handshake, then parses frames (header, payload, tag) and tampers with data frame K:
 * flip one payload bit ("flip") or the lowest bit of a header field ("flip-type", "flip-coll",
 * "flip-epoch", "flip-seq", "flip-index", "flip-len"), truncate the frame and close both ends,
 * or send the frame twice. The frame is relayed with the length it had before the flip.
 */
#include "ring/frame.h"
#include "ring/sec.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Byte offset of header field `name` (frame.h), or -1. */
static int field_offset(const char *name) {
    static const struct {
        const char *name;
        int off;
    } f[] = {{"type", 6}, {"coll", 7}, {"epoch", 8}, {"seq", 16}, {"index", 24}, {"len", 28}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (strcmp(name, f[i].name) == 0) return f[i].off;
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: tamper_proxy LISTEN_PORT TARGET_PORT "
                        "flip[-type|-coll|-epoch|-seq|-index|-len]|truncate|replay K\n");
        return 2;
    }
    const char *mode = argv[3];
    int field = strncmp(mode, "flip-", 5) == 0 ? field_offset(mode + 5) : -1;
    if (strncmp(mode, "flip-", 5) == 0 && field < 0) {
        fprintf(stderr, "tamper_proxy: unknown header field %s\n", mode + 5);
        return 2;
    }
    long k = atol(argv[4]);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 4) != 0) {
        perror("tamper_proxy: listen");
        return 2;
    }
    printf("proxy listening\n");
    fflush(stdout);
    int in = accept(lfd, NULL, NULL);
    if (in < 0) return 2;
    int out = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons((uint16_t)atoi(argv[2]));
    for (int i = 0; connect(out, (struct sockaddr *)&a, sizeof a) != 0; i++) {
        if (i > 200) return 2;
        close(out);
        out = socket(AF_INET, SOCK_STREAM, 0);
        usleep(50000);
    }
    size_t cap = 8 << 20, have = 0, hs_left = SEC_HS_INIT_BYTES_SECURE;
    uint8_t *buf = malloc(cap), tmp[65536];
    long frame_no = 0;
    int done = 0;
    while (!done) {
        struct pollfd p[2] = {{.fd = in, .events = POLLIN}, {.fd = out, .events = POLLIN}};
        if (poll(p, 2, 60000) <= 0) break;
        if (p[1].revents) { /* responder -> initiator: relay unchanged */
            ssize_t n = recv(out, tmp, sizeof tmp, 0);
            if (n <= 0 || write_all(in, tmp, (size_t)n) != 0) break;
        }
        if (!p[0].revents) continue;
        ssize_t n = recv(in, buf + have, cap - have, 0);
        if (n <= 0) break;
        have += (size_t)n;
        size_t pos = 0;
        for (;;) {
            if (hs_left > 0) {
                size_t m = have - pos < hs_left ? have - pos : hs_left;
                if (m == 0 || write_all(out, buf + pos, m) != 0) break;
                pos += m;
                hs_left -= m;
                continue;
            }
            if (have - pos < FRAME_HDR) break;
            frame_hdr h;
            frame_decode(buf + pos, &h);
            size_t flen = FRAME_HDR + h.len + SEC_TAG;
            if (flen > cap) return 2;
            if (have - pos < flen) break;
            uint8_t *f = buf + pos;
            if (h.type == FRAME_DATA && frame_no++ == k) {
                if (field >= 0) {
                    f[field] ^= 0x01;
                    printf("proxy: flipped the lowest bit of the %s field of frame %ld\n", mode + 5,
                           k);
                } else if (strcmp(mode, "flip") == 0) {
                    f[FRAME_HDR + h.len / 2] ^= 0x04;
                    printf("proxy: flipped a bit of frame %ld\n", k);
                } else if (strcmp(mode, "truncate") == 0) {
                    write_all(out, f, flen / 2);
                    printf("proxy: truncated frame %ld and closed\n", k);
                    done = 1;
                    break;
                } else if (strcmp(mode, "replay") == 0) {
                    write_all(out, f, flen);
                    printf("proxy: replayed frame %ld\n", k);
                }
                fflush(stdout);
            }
            if (write_all(out, f, flen) != 0) {
                done = 1;
                break;
            }
            pos += flen;
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
    }
    fflush(stdout);
    close(in);
    close(out);
    free(buf);
    return 0;
}
