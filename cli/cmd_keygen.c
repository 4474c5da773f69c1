/*
 * cmd_keygen.c: `hetring keygen`, identity keys and cluster pre-shared keys.
 *
 * The secret goes to a file created with mode 0600 (an existing file is kept unless --force);
 * the public key, 64 hex digits, goes to stdout for the node's `pubkey = ...` line. Secrets
 * never reach stdout, stderr or a log.
 */
#include "cli/cli.h"
#include "ring/sec.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring keygen --out FILE [--psk] [--force]\n"
            "\n"
            "Write a node identity secret key (Ed25519) to FILE with mode 0600 and print its\n"
            "public key as 64 hex digits, for the node's 'pubkey = ...' line in the cluster\n"
            "file; point [cluster] key_file at FILE (\"{id}\" in key_file becomes the node id).\n"
            "\n"
            "  --out FILE   where the secret key goes\n"
            "  --psk        write a cluster pre-shared key instead (for psk_file); prints nothing\n"
            "  --force      replace FILE if it exists\n"
            "  --help       this text\n");
}

int cmd_keygen(int argc, char **argv) {
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"psk", no_argument, 0, 'p'},
                                         {"force", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL;
    int psk = 0, force = 0, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch == 'o')
            out = optarg;
        else if (ch == 'p')
            psk = 1;
        else if (ch == 'f')
            force = 1;
        else
            return usage(stderr), CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error("keygen", "unexpected argument '%s'", argv[optind]);
    if (!out) return cli_usage_error("keygen", "--out FILE is required");
    if (sodium_init() < 0) {
        fprintf(stderr, "hetring keygen: libsodium failed to start\n");
        return CLI_FAIL;
    }
    uint8_t key[32], pk[32];
    char err[HR_ERRLEN], hex[65];
    randombytes_buf(key, sizeof key);
    hr_status st = sec_write_key_file(out, key,
                                      psk ? "hetring cluster pre-shared key; keep it private"
                                          : "hetring node identity secret key; keep it private",
                                      force, err, sizeof err);
    if (st == HR_OK && !psk) sec_identity_public(key, pk);
    sodium_memzero(key, sizeof key);
    if (st != HR_OK) {
        fprintf(stderr, "hetring keygen: %s\n", err);
        return CLI_FAIL;
    }
    if (psk) {
        fprintf(stderr,
                "hetring keygen: wrote a pre-shared key to %s (mode 0600); copy it to every node "
                "and set '[cluster] psk_file = %s' in the cluster file\n",
                out, out);
        return CLI_OK;
    }
    cfg_hex_encode(pk, 32, hex);
    printf("%s\n", hex);
    fprintf(stderr,
            "hetring keygen: wrote %s (mode 0600); add 'pubkey = %s' to this node's section\n", out,
            hex);
    return CLI_OK;
}
