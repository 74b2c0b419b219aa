// The two CUDA driver API functions ThunderKittens' host code calls (TMA descriptors are built with
// cuTensorMapEncodeTiled, its errors named with cuGetErrorString), resolved at run time from the
// driver library the way the CUDA runtime finds it (dlopen "libcuda.so.1"). So the extension needs
// no libcuda.so at link time: containers often mount only libcuda.so.1, and the toolkit's stub
// directory is not always installed.
#include <cuda.h>
#include <dlfcn.h>

namespace {

void* driver() {
    static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return handle;
}

template <typename F>
F lookup(const char* name) {
    void* handle = driver();
    return handle == nullptr ? nullptr : reinterpret_cast<F>(dlsym(handle, name));
}

}  // namespace

extern "C" CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* address,
    const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    using F = CUresult(CUDAAPI*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static const F fn = lookup<F>("cuTensorMapEncodeTiled");
    if (fn == nullptr) return CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;
    return fn(map, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle,
              l2, oob);
}

extern "C" CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
    using F = CUresult(CUDAAPI*)(CUresult, const char**);
    static const F fn = lookup<F>("cuGetErrorString");
    if (fn == nullptr) {
        *text = "the CUDA driver library libcuda.so.1 could not be loaded";
        return CUDA_SUCCESS;
    }
    return fn(error, text);
}
