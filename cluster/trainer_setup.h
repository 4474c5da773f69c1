/*
 * trainer_setup.h: the trainer's and the controller's configs, made from the cluster's INI
 * config (the one place that knows both sides).
 *
 * The trainer (train_config, with model_config, data_config and opt_config inside) and the
 * controller (ctrl_config) never see the whole cfg; this conversion happens once per node, in
 * the application. The enums and limits that conf/ shares with trainer/ and ctrl/ are checked
 * to agree at compile time (trainer_setup.c).
 */
#ifndef HR_TRAINER_SETUP_H
#define HR_TRAINER_SETUP_H

#include "conf/cfg.h"
#include "ctrl/ctrl.h"
#include "trainer/train.h"

/* Whether node c->nodes[k] runs on the machine of node c->nodes[self_idx]: same[k], which nodes
 * do (node_id_check_hosts: resolved addresses), or with same NULL whether k's host is written
 * as self_idx's (case aside), where two spellings of one machine count as two. */
int app_same_machine(const cfg *c, int self_idx, const int *same, int k);

/* Fill `out` for node c->nodes[self_idx]: the [train] section, the node's threads, device,
 * slowdown and interference schedule, the nodes on its machine (same: app_same_machine), and
 * whether any node of the cluster emulates a slowdown. Strings in `out` point into c, which
 * must outlive every trainer built from it; the checkpoint path is out's own
 * (app_checkpoint_path). */
void app_train_config(const cfg *c, int self_idx, const int *same, train_config *out);

/* Node c->nodes[self_idx]'s checkpoint file: [train] checkpoint with every "{id}" replaced by
 * the node's id (as --metrics FILE's), so that nodes sharing a disk each keep their own and
 * with it their own error-feedback residual; "" for none. The configuration's check makes sure
 * that it fits CFG_PATH bytes for every node (n must be at least that). */
void app_checkpoint_path(const cfg *c, int self_idx, char *out, size_t n);

/* Whether node c->nodes[self_idx] writes the same checkpoint file as another node of its
 * machine (no "{id}" in [train] checkpoint, and a node on the machine: same, app_same_machine)
 * while its wire keeps an error-feedback residual (bf16, powersgd, auto): the last writer's
 * residual is then the only one kept, and the other nodes resume without theirs. */
int app_checkpoint_shared(const cfg *c, int self_idx, const int *same);

/* Whether node c->nodes[self_idx]'s device can be used here: `device = cpu` always; `device =
 * cuda:N` when this build has CUDA and this machine has device N (device_cuda_check), or when
 * the test hook emu_device emulates it (HETRING_FAULT=emu_device:NODE[:DELAY_MS], builds with the
 * test hooks only). HR_ERR_CONFIG names the file, the node, the key and the reason. */
hr_status app_check_device(const cfg *c, int self_idx, char *err, size_t errlen);

/* Node c->nodes[self_idx]'s emulated slowdown: its slowdown and interference schedule (the
 * trainer's when it trains alone, the cluster's otherwise, cluster_setup.h). */
void app_train_stretch(const cfg *c, int self_idx, train_stretch *out);

/* The [controller] section as the controller's config. */
void app_ctrl_config(const cfg *c, ctrl_config *out);

#endif
