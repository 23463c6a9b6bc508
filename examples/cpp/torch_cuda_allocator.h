#pragma once

// Makes zh_cuda_malloc / zh_cuda_free libtorch's CUDA allocator (torch_cuda_allocator.cpp).
// Returns false when libtorch refuses, e.g. because a CUDA tensor was already made.
bool install_zerohop_cuda_allocator();
