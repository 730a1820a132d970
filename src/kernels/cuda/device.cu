// CUDA device, memory and stream primitives behind kernels.h's "CUDA backend" section: plain
// cudaMalloc (never managed memory), explicit copies, streams and events. Issue 22.
#include <cublas_api.h>
#include <stdio.h>

#include "cuda_common.cuh"

extern "C" {

int slm_cuda_device_count(int *n) {
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    // no driver / no device: a count of 0, not an error (CPU machines, CI)
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        *n = 0;
        return 0;
    }
    return (int)e;
}

int slm_cuda_set_device(int dev) {
    return (int)cudaSetDevice(dev);
}

int slm_cuda_pci_bus_id(int dev, char *buf, int len) {
    return (int)cudaDeviceGetPCIBusId(buf, len, dev);
}

int slm_cuda_device_name(int dev, char *buf, int len) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) return (int)e;
    snprintf(buf, (size_t)len, "%s (sm_%d%d)", p.name, p.major, p.minor);
    return 0;
}

int slm_cuda_mem_info(size_t *free_b, size_t *total_b) {
    return (int)cudaMemGetInfo(free_b, total_b);
}

int slm_cuda_malloc(void **p, size_t bytes) {
    *p = NULL;
    return bytes ? (int)cudaMalloc(p, bytes) : 0;
}

int slm_cuda_free(void *p) {
    return p ? (int)cudaFree(p) : 0;
}

int slm_cuda_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    return bytes ? (int)cudaMallocHost(p, bytes) : 0;
}

int slm_cuda_host_free(void *p) {
    return p ? (int)cudaFreeHost(p) : 0;
}

int slm_cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, slm_cuda_stream_(stream));
}

int slm_cuda_memset_async(void *dst, int byte, size_t bytes, void *stream) {
    return (int)cudaMemsetAsync(dst, byte, bytes, slm_cuda_stream_(stream));
}

int slm_cuda_stream_create(void **s) {
    cudaStream_t st = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = st;
    return (int)e;
}

int slm_cuda_stream_destroy(void *s) {
    return s ? (int)cudaStreamDestroy((cudaStream_t)s) : 0;
}

int slm_cuda_stream_sync(void *s) {
    return (int)cudaStreamSynchronize(slm_cuda_stream_(s));
}

int slm_cuda_event_create(void **ev) {
    cudaEvent_t e = NULL;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *ev = e;
    return (int)r;
}

int slm_cuda_event_destroy(void *ev) {
    return ev ? (int)cudaEventDestroy((cudaEvent_t)ev) : 0;
}

int slm_cuda_event_record(void *ev, void *stream) {
    return (int)cudaEventRecord((cudaEvent_t)ev, slm_cuda_stream_(stream));
}

int slm_cuda_stream_wait_event(void *stream, void *ev) {
    return (int)cudaStreamWaitEvent(slm_cuda_stream_(stream), (cudaEvent_t)ev, 0);
}

const char *slm_cuda_strerror(int code) {
    if (code >= SLM_CUDA_CUBLAS_BASE) {
        switch ((cublasStatus_t)(code - SLM_CUDA_CUBLAS_BASE)) {
        case CUBLAS_STATUS_NOT_INITIALIZED:
            return "cuBLAS: not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED:
            return "cuBLAS: allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE:
            return "cuBLAS: invalid value";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "cuBLAS: architecture mismatch";
        case CUBLAS_STATUS_EXECUTION_FAILED:
            return "cuBLAS: execution failed";
        case CUBLAS_STATUS_NOT_SUPPORTED:
            return "cuBLAS: not supported (no algorithm for the shape)";
        default:
            return "cuBLAS: error";
        }
    }
    return cudaGetErrorString((cudaError_t)code);
}

} // extern "C"
