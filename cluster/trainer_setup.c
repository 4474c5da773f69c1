/*
 * trainer_setup.c: cfg -> train_config and ctrl_config (see trainer_setup.h).
 *
 * conf/ numbers its enums for the INI schema, and the trainer and the controller number their
 * own; where the numbers are shared (a model kind is also stored in checkpoints) the
 * assertions below keep them in step, so a reordered enum fails the build instead of a run.
 */
#include "cluster/trainer_setup.h"
#include "base/hr_log.h"
#include "cluster/hr_fault.h"
#include "cluster/nccl_path.h"
#include "cluster/ring_setup.h"

#include <string.h>
#include <strings.h>

_Static_assert((int)MODEL_LINREG == (int)CFG_MODEL_LINREG &&
                   (int)MODEL_SOFTMAX == (int)CFG_MODEL_SOFTMAX &&
                   (int)MODEL_MLP == (int)CFG_MODEL_MLP && (int)MODEL_CNN == (int)CFG_MODEL_CNN,
               "model_kind must share cfg_model's values (checkpoints store them)");
_Static_assert((int)DATA_SYNTHETIC == (int)CFG_DATA_SYNTHETIC &&
                   (int)DATA_SYNTHETIC_RGB == (int)CFG_DATA_SYNTHETIC_RGB &&
                   (int)DATA_SYNTHETIC_REGRESSION == (int)CFG_DATA_SYNTHETIC_REGRESSION &&
                   (int)DATA_MNIST == (int)CFG_DATA_MNIST &&
                   (int)DATA_CIFAR10 == (int)CFG_DATA_CIFAR10 && (int)DATA_CSV == (int)CFG_DATA_CSV,
               "data_kind must share cfg_dataset's values");
_Static_assert((int)OPT_LR_CONSTANT == (int)CFG_LR_CONSTANT &&
                   (int)OPT_LR_STEP == (int)CFG_LR_STEP && (int)OPT_LR_COSINE == (int)CFG_LR_COSINE,
               "opt_schedule must share cfg_lr_schedule's values");
_Static_assert((int)CTRL_STATIC == (int)CFG_POLICY_STATIC &&
                   (int)CTRL_PROPORTIONAL == (int)CFG_POLICY_PROPORTIONAL &&
                   (int)CTRL_PID == (int)CFG_POLICY_PID &&
                   (int)CTRL_MODEL == (int)CFG_POLICY_MODEL &&
                   (int)CTRL_EPOCH == (int)CFG_POLICY_EPOCH,
               "ctrl_policy must share cfg_policy's values");
_Static_assert(CFG_MAX_LAYERS <= MODEL_MAX_WIDTHS, "every [train] layers list must fit");
_Static_assert(CFG_MAX_PHASES <= TRAIN_MAX_PHASES, "every interference schedule must fit");
_Static_assert(CFG_PATH <= TRAIN_PATH, "every node's checkpoint path must fit a train_config");

static void model_config_of(const cfg *c, model_config *out) {
    memset(out, 0, sizeof *out);
    out->kind = (model_kind)c->model;
    memcpy(out->layers, c->layers, sizeof c->layers);
    out->n_layers = c->n_layers;
    out->name = cfg_model_name(c->model);
    out->data_name = cfg_dataset_name(c->dataset);
    out->origin = c->path;
}

static void data_config_of(const cfg *c, data_config *out) {
    *out = (data_config){.kind = (data_kind)c->dataset,
                         .dir = c->data_dir,
                         .samples = c->samples,
                         .eval_samples = c->eval_samples,
                         .csv_regression = c->model == CFG_MODEL_LINREG,
                         .name = cfg_dataset_name(c->dataset),
                         .origin = c->path};
    if (cfg_key_line(c, -1, "eval_samples") != 0) /* given: a held-out file is cut to it */
        cfg_where(c, -1, "eval_samples", out->eval_at, sizeof out->eval_at);
    if (cfg_key_line(c, -1, "samples") != 0) /* given: the training files are cut to it */
        cfg_where(c, -1, "samples", out->samples_at, sizeof out->samples_at);
}

static void opt_config_of(const cfg *c, opt_config *out) {
    *out = (opt_config){.lr = c->lr,
                        .schedule = (opt_schedule)c->lr_schedule,
                        .step = c->lr_step,
                        .gamma = c->lr_gamma,
                        .warmup = c->warmup,
                        .momentum = c->momentum,
                        .weight_decay = c->weight_decay};
}

void app_train_stretch(const cfg *c, int self_idx, train_stretch *out) {
    const cfg_node *me = &c->nodes[self_idx];
    memset(out, 0, sizeof *out);
    out->slowdown = me->slowdown;
    out->n_phases = me->n_interference;
    for (int i = 0; i < me->n_interference; i++)
        out->phases[i] = (train_phase){me->interference[i].iter, me->interference[i].factor};
}

int app_same_machine(const cfg *c, int self_idx, const int *same, int k) {
    return same ? same[k] != 0 : strcasecmp(c->nodes[k].host, c->nodes[self_idx].host) == 0;
}

void app_train_config(const cfg *c, int self_idx, const int *same, train_config *out) {
    memset(out, 0, sizeof *out);
    model_config_of(c, &out->model);
    data_config_of(c, &out->data);
    opt_config_of(c, &out->opt);
    out->global_batch = c->global_batch;
    out->seed = c->seed;
    out->iterations = c->iterations;
    out->epochs = c->epochs;
    out->eval_interval = c->eval_interval;
    app_checkpoint_path(c, self_idx, out->checkpoint, sizeof out->checkpoint);
    out->checkpoint_interval = c->checkpoint_interval;
    out->skip_nonfinite = c->nonfinite == CFG_NONFINITE_SKIP;
    out->skip_limit = c->nonfinite_limit;
    out->origin = c->path;
    out->threads = c->nodes[self_idx].threads;
    out->node_id = c->nodes[self_idx].id;
    for (int k = 0; k < c->n_nodes; k++) out->host_nodes += app_same_machine(c, self_idx, same, k);
    cfg_where(c, self_idx, "threads", out->threads_at, sizeof out->threads_at);
    const cfg_node *me = &c->nodes[self_idx];
    double delay_ms;
    if (me->device >= 0) out->device = device_cuda_ops, out->device_index = (int)me->device;
    if (hr_fault_get("emu_device", me->id, 0, &delay_ms)) {
        out->device = hr_fault_emu_device(); /* a test: the GPU emulated on the host */
        out->device_index = me->device >= 0 ? (int)me->device : 0;
        out->device_delay_s = delay_ms / 1000.0;
    }
    app_train_stretch(c, self_idx, &out->stretch);
    for (int k = 0; k < c->n_nodes; k++)
        if (c->nodes[k].slowdown != 1.0 || c->nodes[k].n_interference) out->emulated = 1;
}

void app_checkpoint_path(const cfg *c, int self_idx, char *out, size_t n) {
    if (app_expand_id(out, n, c->checkpoint, c->nodes[self_idx].id) != 0)
        out[0] = 0; /* never: cfg_load refused a path that does not fit once expanded */
}

int app_checkpoint_shared(const cfg *c, int self_idx, const int *same) {
    if (!c->checkpoint[0] || strstr(c->checkpoint, "{id}") || c->wire == CFG_WIRE_FP32) return 0;
    for (int k = 0; k < c->n_nodes; k++)
        if (k != self_idx && app_same_machine(c, self_idx, same, k)) return 1;
    return 0;
}

/* backend = nccl: every view of this node runs NCCL, so its library must load (with auto a view
 * that cannot falls back to TCP, and NCCL is opened only when a view chooses it). Checked for
 * an emulated device too, unless the recording fake stands in for NCCL. */
static hr_status check_nccl(const cfg *c, const cfg_node *me, char *err, size_t errlen) {
    const nccl_path_ops *nccl = nccl_path_real();
    char why[HR_ERRLEN];
    double arg;
    if (c->backend != CFG_BACKEND_NCCL || !nccl || hr_fault_get("fake_nccl", me->id, 0, &arg) ||
        nccl->load(why, sizeof why) == HR_OK)
        return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: [cluster] backend = nccl on [node.%ld] (device = cuda:%ld): %s (install "
                   "it or point HETRING_CUDA_LIBS at its directory, or use backend = auto, which "
                   "stays on TCP where NCCL cannot run)",
                   c->path, me->id, me->device, why);
}

hr_status app_check_device(const cfg *c, int self_idx, char *err, size_t errlen) {
    const cfg_node *me = &c->nodes[self_idx];
    double delay_ms;
    if (me->device < 0) return HR_OK;
    if (hr_fault_get("emu_device", me->id, 0, &delay_ms)) {
        HR_WARN(TRAIN,
                "test hook: node %ld's device cuda:%ld is emulated on the host (%g ms a step)",
                me->id, me->device, delay_ms);
        return check_nccl(c, me, err, errlen);
    }
    char why[HR_ERRLEN];
    if (device_cuda_check((int)me->device, why, sizeof why) != HR_OK)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: [node.%ld] device = cuda:%ld: %s", c->path,
                       me->id, me->device, why);
    return check_nccl(c, me, err, errlen);
}

void app_ctrl_config(const cfg *c, ctrl_config *out) {
    *out = (ctrl_config){.policy = (ctrl_policy)c->policy,
                         .interval = c->interval,
                         .deadband = c->deadband,
                         .gain = c->gain,
                         .ki = c->ki,
                         .kd = c->kd,
                         .min_batch = c->min_batch,
                         .max_batch = c->max_batch,
                         .smoothing = c->smoothing,
                         .rate_limit = c->rate_limit,
                         .forgetting = c->forgetting};
}
