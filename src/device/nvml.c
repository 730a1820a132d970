// GPU counters through NVML (issue 22: Prometheus gauges and the health check's ECC test, as
// DCGM's exporter reports them): memory used, utilisation, power, temperature, uncorrected ECC
// errors. libnvidia-ml.so.1 comes with the driver, not the toolkit (this build machine has no
// nvml.h), so it is opened with dlopen and the handful of entry points used are declared here from
// NVML's documented C API (nvml.h of the NVIDIA Management Library: functions return 0 =
// NVML_SUCCESS; nvmlDevice_t is an opaque pointer). No driver, no library, or a CPU / SLEEP
// device: the counters are reported as unavailable (valid = false), never as zeros.
#include "device/device_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

typedef void *nvml_dev;
typedef struct {
    unsigned int gpu, memory; // percent of the last sample period
} nvml_util;
typedef struct {
    unsigned long long total, free, used; // bytes
} nvml_mem;

static struct {
    int ok;
    int (*init)(void);
    int (*by_pci)(const char *bus, nvml_dev *out);
    int (*util)(nvml_dev, nvml_util *);
    int (*power)(nvml_dev, unsigned int *mw);
    int (*temp)(nvml_dev, int sensor, unsigned int *c);
    int (*mem)(nvml_dev, nvml_mem *);
    int (*ecc)(nvml_dev, int type, int counter, unsigned long long *n);
} g_nv;
static pthread_once_t g_nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
        // POSIX: a function pointer may be stored through a void * from dlsym (the memcpy form
        // keeps -Wpedantic quiet about the conversion).
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        void *p_ = dlsym(h, name);                                                                 \
        if (!p_) return;                                                                           \
        memcpy(&g_nv.field, &p_, sizeof p_);                                                       \
    } while (0)
    SYM(init, "nvmlInit_v2");
    SYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(util, "nvmlDeviceGetUtilizationRates");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(temp, "nvmlDeviceGetTemperature");
    SYM(mem, "nvmlDeviceGetMemoryInfo");
    SYM(ecc, "nvmlDeviceGetTotalEccErrors");
#undef SYM
    g_nv.ok = g_nv.init() == 0;
}

void slm_device_nvml_read(const char *pci_bus_id, slm_device_stats *out) {
    memset(out, 0, sizeof *out);
    out->ecc_uncorrected = -1;
    pthread_once(&g_nv_once, nv_load);
    nvml_dev dv = NULL;
    if (!g_nv.ok || !pci_bus_id || g_nv.by_pci(pci_bus_id, &dv) != 0) return;
    nvml_util u;
    nvml_mem m;
    unsigned int mw = 0, c = 0;
    unsigned long long e = 0;
    if (g_nv.mem(dv, &m) == 0) out->mem_used_b = (double)m.used, out->mem_total_b = (double)m.total;
    if (g_nv.util(dv, &u) == 0) out->util_ratio = u.gpu / 100.0;
    if (g_nv.power(dv, &mw) == 0) out->power_w = mw / 1000.0;
    if (g_nv.temp(dv, 0 /* NVML_TEMPERATURE_GPU */, &c) == 0) out->temp_c = c;
    // NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0 (since the driver loaded);
    // GPUs without ECC answer NOT_SUPPORTED: left at -1.
    if (g_nv.ecc(dv, 1, 0, &e) == 0) out->ecc_uncorrected = (double)e;
    out->valid = true;
}
