// libtorch's CUDA allocations drawn from zerohop: every at::Tensor that libtorch makes on a GPU
// (the model's weights, its intermediates, its outputs) comes from the resource that is current
// for that device in zerohop (zh_resource_set_current), the same pool the SoA tables use.
//
// A translation unit of its own because CUDAPluggableAllocator.h needs the CUDA runtime's
// headers, which a CPU build of the example does without (run.sh compiles this file only when
// they are there).

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include "torch_cuda_allocator.h"
#include "zerohop.h"

bool install_zerohop_cuda_allocator() {
  // libtorch refuses to swap an allocator that has already handed out memory, so this must run
  // before the first CUDA tensor; it reports that as an exception, which becomes `false` here.
  try {
    auto allocator = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
        [](size_t size, int device, cudaStream_t stream) {
          return zh_cuda_malloc(static_cast<intptr_t>(size), device, stream);
        },
        [](void* ptr, size_t size, int device, cudaStream_t stream) {
          zh_cuda_free(ptr, static_cast<intptr_t>(size), device, stream);
        });
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}
