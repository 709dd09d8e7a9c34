/*
 * gpulab test double of libnvidia-ml.so.1. TEST ONLY: not NVIDIA software, never installed outside the lab.
 *
 * The lab's fake driver packages ship this library where the real ones ship NVML, so nvidia-ml-py (pynvml)
 * loads it exactly as it loads the real one and gpu_health's NVML path runs on lab nodes. It answers the
 * calls gpu_health makes (module_utils/gpu_nvml.py), with the signatures and structure layouts of nvml.h,
 * from the lab GPU simulator's replay of recorded nvidia-smi outputs: at nvmlInit it runs the simulator
 * with GPUSIM_TOOL=nvml (lab/simulator/nvidia_smi.py, cmd_nvml) and keeps what it printed.
 *
 * Without the simulator (a node with no simulated GPUs) nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED, as
 * the real library does on a machine whose driver is not loaded. A dump it cannot fully read (a missing
 * field, a short line, a failed run) makes nvmlInit answer NVML_ERROR_UNKNOWN rather than invent a value.
 * A field the recorded output shows as N/A answers NVML_ERROR_NOT_SUPPORTED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef GPUSIM_SIMULATOR
#define GPUSIM_SIMULATOR "/opt/gpusim/nvidia_smi.py"
#endif

typedef int nvmlReturn_t;
typedef struct gpulab_gpu *nvmlDevice_t;

enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7,
    DRIVER_NOT_LOADED = 9, UNKNOWN = 999
};

/* nvml.h layouts */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
    unsigned int healthMask; /* v2 only */
} nvmlGpuFabricInfoV_t;

static const char *KEYS[] = {
    "index", "name", "uuid", "bus_id", "persistence", "ecc_volatile", "ecc_aggregate", "retired_pending",
    "retired_dbe", "remap_correctable", "remap_uncorrectable", "remap_pending", "remap_failure", "pcie_gen",
    "pcie_gen_max", "pcie_width", "pcie_width_max", "temperature", "power_mw", "limit_mw", "reasons",
    "fabric_state", "fabric_status", "slowdown", "shutdown"};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]))
#define MAXGPU 64
#define VALUE_LEN 128

struct gpulab_gpu {
    char value[NKEYS][VALUE_LEN];
};

static struct gpulab_gpu gpus[MAXGPU];
static unsigned int gpu_count;
static char driver_version[80];
static int init_count;

static int key_index(const char *key, size_t len)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strlen(KEYS[i]) == len && strncmp(KEYS[i], key, len) == 0)
            return (int)i;
    return -1;
}

/* One GPU line: every key exactly once, tab separated. */
static int parse_gpu(char *line, struct gpulab_gpu *gpu)
{
    int seen[NKEYS] = {0};
    char *save = NULL;
    for (char *tok = strtok_r(line, "\t", &save); tok; tok = strtok_r(NULL, "\t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return -1;
        int k = key_index(tok, (size_t)(eq - tok));
        if (k < 0 || seen[k] || strlen(eq + 1) >= VALUE_LEN)
            return -1;
        strcpy(gpu->value[k], eq + 1);
        seen[k] = 1;
    }
    for (size_t i = 0; i < NKEYS; i++)
        if (!seen[i])
            return -1;
    return 0;
}

static nvmlReturn_t load(void)
{
    const char *sim = getenv("GPUSIM_SIMULATOR");
    if (!sim || !*sim)
        sim = GPUSIM_SIMULATOR;
    if (access(sim, X_OK) != 0)
        return DRIVER_NOT_LOADED;
    int fds[2];
    if (pipe(fds) != 0)
        return UNKNOWN;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return UNKNOWN;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("GPUSIM_TOOL", "nvml", 1);
        execl(sim, sim, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    char line[8192];
    unsigned int n = 0;
    int bad = in == NULL, got_driver = 0;
    while (in && fgets(line, sizeof(line), in)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') {
            bad = 1; /* truncated */
            continue;
        }
        line[len - 1] = '\0';
        if (strncmp(line, "driver\t", 7) == 0) {
            if (strlen(line + 7) >= sizeof(driver_version))
                bad = 1;
            else
                strcpy(driver_version, line + 7);
            got_driver = 1;
        } else if (n >= MAXGPU || parse_gpu(line, &gpus[n++]) != 0) {
            bad = 1;
        }
    }
    if (in)
        fclose(in);
    else
        close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return WIFEXITED(status) && WEXITSTATUS(status) == 9 ? DRIVER_NOT_LOADED : UNKNOWN;
    if (bad || !got_driver)
        return UNKNOWN;
    gpu_count = n;
    return OK;
}

static nvmlReturn_t init(void)
{
    nvmlReturn_t ret = OK;
    if (init_count == 0)
        ret = load();
    if (ret == OK)
        init_count++;
    return ret;
}

nvmlReturn_t nvmlInit(void) { return init(); }
nvmlReturn_t nvmlInit_v2(void) { return init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return init(); }

nvmlReturn_t nvmlShutdown(void)
{
    if (init_count == 0)
        return UNINITIALIZED;
    init_count--;
    return OK;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

static struct gpulab_gpu *dev(nvmlDevice_t d)
{
    if (init_count == 0 || d < gpus || d >= gpus + gpu_count)
        return NULL;
    return d;
}

/* A field as a number: OK, NOT_SUPPORTED (recorded N/A) or UNKNOWN (not a number). */
static nvmlReturn_t number(nvmlDevice_t d, const char *key, unsigned long long *out)
{
    struct gpulab_gpu *g = dev(d);
    if (!g || !out)
        return g ? INVALID_ARGUMENT : UNINITIALIZED;
    const char *v = g->value[key_index(key, strlen(key))];
    if (strcmp(v, "NA") == 0)
        return NOT_SUPPORTED;
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end)
        return UNKNOWN;
    *out = x;
    return OK;
}

static nvmlReturn_t uint_field(nvmlDevice_t d, const char *key, unsigned int *out)
{
    unsigned long long x = 0;
    if (!out)
        return INVALID_ARGUMENT;
    nvmlReturn_t r = number(d, key, &x);
    if (r == OK)
        *out = (unsigned int)x;
    return r;
}

static nvmlReturn_t text(nvmlDevice_t d, const char *key, char *buf, unsigned int len)
{
    struct gpulab_gpu *g = dev(d);
    if (!g || !buf)
        return g ? INVALID_ARGUMENT : UNINITIALIZED;
    const char *v = g->value[key_index(key, strlen(key))];
    if (strlen(v) + 1 > len)
        return INSUFFICIENT_SIZE;
    strcpy(buf, v);
    return OK;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len)
{
    if (init_count == 0)
        return UNINITIALIZED;
    if (!buf || strlen(driver_version) + 1 > len)
        return buf ? INSUFFICIENT_SIZE : INVALID_ARGUMENT;
    if (strcmp(driver_version, "NA") == 0)
        return NOT_SUPPORTED;
    strcpy(buf, driver_version);
    return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (init_count == 0)
        return UNINITIALIZED;
    if (!count)
        return INVALID_ARGUMENT;
    *count = gpu_count;
    return OK;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (init_count == 0)
        return UNINITIALIZED;
    if (!device || index >= gpu_count)
        return INVALID_ARGUMENT;
    *device = &gpus[index];
    return OK;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len) { return text(d, "name", buf, len); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len) { return text(d, "uuid", buf, len); }

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    if (!pci)
        return INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    nvmlReturn_t r = text(d, "bus_id", pci->busId, sizeof(pci->busId));
    if (r != OK)
        return r;
    /* 00000000:19:00.0 */
    if (sscanf(pci->busId, "%x:%x:%x.", &pci->domain, &pci->bus, &pci->device) != 3)
        return UNKNOWN;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04x:%02x:%02x.0", pci->domain, pci->bus,
             pci->device);
    return OK;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode)
{
    return uint_field(d, "persistence", mode);
}

/* errorType 1 = uncorrected; counterType 0 = volatile, 1 = aggregate */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType, unsigned long long *count)
{
    if (errorType != 1)
        return dev(d) ? NOT_SUPPORTED : UNINITIALIZED;
    if (counterType != 0 && counterType != 1)
        return INVALID_ARGUMENT;
    return number(d, counterType == 0 ? "ecc_volatile" : "ecc_aggregate", count);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, unsigned int *pending)
{
    return uint_field(d, "retired_pending", pending);
}

/* cause 1 = double-bit ECC. The recorded outputs give counts, not addresses: the addresses are 0. */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *count, unsigned long long *addresses)
{
    unsigned long long n = 0;
    if (!count)
        return INVALID_ARGUMENT;
    if (cause != 1)
        return dev(d) ? NOT_SUPPORTED : UNINITIALIZED;
    nvmlReturn_t r = number(d, "retired_dbe", &n);
    if (r != OK)
        return r;
    if (*count < n || (!addresses && n > 0)) {
        *count = (unsigned int)n;
        return INSUFFICIENT_SIZE;
    }
    for (unsigned long long i = 0; addresses && i < n; i++)
        addresses[i] = 0;
    *count = (unsigned int)n;
    return OK;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                                       unsigned int *failure)
{
    nvmlReturn_t r;
    if ((r = uint_field(d, "remap_correctable", corr)) != OK || (r = uint_field(d, "remap_uncorrectable", unc)) != OK
        || (r = uint_field(d, "remap_pending", pending)) != OK || (r = uint_field(d, "remap_failure", failure)) != OK)
        return r;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return number(d, "reasons", reasons);
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return number(d, "reasons", reasons);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { return uint_field(d, "power_mw", mw); }
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw)
{
    return uint_field(d, "limit_mw", mw);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) { return uint_field(d, "pcie_gen", v); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *v)
{
    return uint_field(d, "pcie_gen_max", v);
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *v) { return uint_field(d, "pcie_width", v); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *v)
{
    return uint_field(d, "pcie_width_max", v);
}

/* sensor 0 = GPU die */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t)
{
    if (sensor != 0)
        return INVALID_ARGUMENT;
    return uint_field(d, "temperature", t);
}

/* 0 = shutdown, 1 = slowdown */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int which, unsigned int *t)
{
    if (which != 0 && which != 1)
        return dev(d) ? NOT_SUPPORTED : UNINITIALIZED;
    return uint_field(d, which == 0 ? "shutdown" : "slowdown", t);
}

/* version 1 (no healthMask) or 2 in the top byte, as nvml.h's nvmlGpuFabricInfo_v1/_v2 */
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfoV_t *info)
{
    unsigned int state = 0, status = 0;
    if (!info)
        return INVALID_ARGUMENT;
    unsigned int version = info->version >> 24;
    if (version != 1 && version != 2)
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    nvmlReturn_t r = uint_field(d, "fabric_state", &state);
    if (r == OK)
        r = uint_field(d, "fabric_status", &status);
    if (r != OK)
        return r;
    memset(info->clusterUuid, 0, sizeof(info->clusterUuid));
    info->status = (nvmlReturn_t)status;
    info->cliqueId = 0;
    info->state = (unsigned char)state;
    if (version == 2)
        info->healthMask = 0;
    return OK;
}
