/* frame.c: encoding of the ring's frame header (see frame.h). */
#include "frame.h"

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void frame_encode(const frame_hdr *h, uint8_t out[FRAME_HDR]) {
    put32(out, h->magic);
    put16(out + 4, h->version);
    out[6] = h->type;
    out[7] = h->coll;
    put64(out + 8, h->epoch);
    put64(out + 16, h->seq);
    put32(out + 24, h->index);
    put32(out + 28, h->len);
}

void frame_decode(const uint8_t in[FRAME_HDR], frame_hdr *h) {
    h->magic = get32(in);
    h->version = get16(in + 4);
    h->type = in[6];
    h->coll = in[7];
    h->epoch = get64(in + 8);
    h->seq = get64(in + 16);
    h->index = get32(in + 24);
    h->len = get32(in + 28);
}

const char *frame_coll_name(int coll) {
    switch (coll) {
    case FRAME_COLL_ALLREDUCE:
        return "all-reduce";
    case FRAME_COLL_ALLGATHER:
        return "all-gather";
    case FRAME_COLL_BROADCAST:
        return "broadcast";
    case FRAME_COLL_BARRIER:
        return "barrier";
    default:
        return "unknown collective";
    }
}
