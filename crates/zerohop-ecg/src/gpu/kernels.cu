// The segmentation stages as CUDA kernels, compiled at run time by NVRTC. Each reproduces the
// CPU implementation (segment.rs) exactly: the same products summed in the same order with
// round-to-nearest multiply and add (no fused multiply-add), exact maxima, and order-keeping
// compaction, so CPU and GPU results are bitwise identical.

// out[i] = sum_j rev[j] * x[(i + 1 - w + j) mod n], oldest sample first.
extern "C" __global__ void curvature(const float* __restrict__ x, const float* __restrict__ rev,
                                     int w, long long n, float* __restrict__ out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    long long k = i + 1 - w;
    for (int j = 0; j < w; ++j, ++k) {
        long long at = k < 0 ? k + n : (k >= n ? k - n : k);
        acc = __fadd_rn(acc, __fmul_rn(rev[j], x[at]));
    }
    out[i] = acc;
}

// gates[p] = 1 where max(curv[p .. p + window]) == curv[p + (window + 1) / 2]; the block's
// span of the curvature is staged in shared memory.
extern "C" __global__ void local_maxima_shared(const float* __restrict__ curv, long long outputs,
                                               int window, unsigned char* __restrict__ gates) {
    extern __shared__ float tile[];
    long long first = (long long)blockIdx.x * blockDim.x;
    long long n = outputs + window - 1;
    int span = blockDim.x + window - 1;
    for (int t = threadIdx.x; t < span; t += blockDim.x) {
        long long g = first + t;
        tile[t] = g < n ? curv[g] : 0.0f;
    }
    __syncthreads();
    long long p = first + threadIdx.x;
    if (p >= outputs) return;
    float m = tile[threadIdx.x];
    for (int j = 1; j < window; ++j) m = fmaxf(m, tile[threadIdx.x + j]);
    gates[p] = m == tile[threadIdx.x + (window + 1) / 2] ? 1 : 0;
}

// The same from global memory, for windows too long for shared memory.
extern "C" __global__ void local_maxima_global(const float* __restrict__ curv, long long outputs,
                                               int window, unsigned char* __restrict__ gates) {
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= outputs) return;
    float m = curv[p];
    for (int j = 1; j < window; ++j) m = fmaxf(m, curv[p + j]);
    gates[p] = m == curv[p + (window + 1) / 2] ? 1 : 0;
}

#define THREADS 256
#define ITEMS 8

// Whether element i is kept: mode 0 keeps rising edges of the flags (the plateau fix),
// mode 1 keeps set flags.
__device__ __forceinline__ bool kept(const unsigned char* flags, long long i, int mode) {
    return flags[i] && (mode == 1 || i == 0 || !flags[i - 1]);
}

// Elements kept among this thread's ITEMS, from `base` on.
__device__ __forceinline__ unsigned int kept_in_items(const unsigned char* flags, long long base,
                                                      long long m, int mode) {
    unsigned int c = 0;
    for (int e = 0; e < ITEMS; ++e) {
        long long i = base + e;
        if (i < m && kept(flags, i, mode)) ++c;
    }
    return c;
}

// counts[b] = elements kept in block b's THREADS * ITEMS elements.
extern "C" __global__ void count_kept(const unsigned char* __restrict__ flags, long long m,
                                      int mode, unsigned long long* __restrict__ counts) {
    __shared__ unsigned int s[THREADS];
    long long base = ((long long)blockIdx.x * THREADS + threadIdx.x) * ITEMS;
    unsigned int c = kept_in_items(flags, base, m, mode);
    s[threadIdx.x] = c;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) counts[blockIdx.x] = s[0];
}

// Writes the kept elements in order from offsets[b] on: mode 0 writes their index to out_a;
// mode 1 writes src_a[i] to out_a and src_b[i] to out_b.
extern "C" __global__ void scatter_kept(const unsigned char* __restrict__ flags, long long m,
                                        int mode, const unsigned long long* __restrict__ offsets,
                                        const long long* __restrict__ src_a,
                                        const long long* __restrict__ src_b,
                                        long long* __restrict__ out_a,
                                        long long* __restrict__ out_b) {
    __shared__ unsigned int s[THREADS];
    long long base = ((long long)blockIdx.x * THREADS + threadIdx.x) * ITEMS;
    unsigned int c = kept_in_items(flags, base, m, mode);
    s[threadIdx.x] = c;
    __syncthreads();
    for (int stride = 1; stride < THREADS; stride <<= 1) {
        unsigned int add = threadIdx.x >= stride ? s[threadIdx.x - stride] : 0;
        __syncthreads();
        s[threadIdx.x] += add;
        __syncthreads();
    }
    unsigned long long pos = offsets[blockIdx.x] + s[threadIdx.x] - c;
    for (int e = 0; e < ITEMS; ++e) {
        long long i = base + e;
        if (i < m && kept(flags, i, mode)) {
            if (mode == 0) {
                out_a[pos] = i;
            } else {
                out_a[pos] = src_a[i];
                out_b[pos] = src_b[i];
            }
            ++pos;
        }
    }
}

// lengths[k] = gates[k + 1] - gates[k]; keep[k] = lo <= lengths[k] <= hi.
extern "C" __global__ void lengths_and_keep(const long long* __restrict__ gates, long long count,
                                            long long lo, long long hi,
                                            long long* __restrict__ lengths,
                                            unsigned char* __restrict__ keep) {
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k + 1 >= count) return;
    long long l = gates[k + 1] - gates[k];
    lengths[k] = l;
    keep[k] = l >= lo && l <= hi ? 1 : 0;
}

// beats[b, t] = x[starts[b] + t] for t < lengths[b], else 0.
extern "C" __global__ void embed(const float* __restrict__ x, const long long* __restrict__ starts,
                                 const long long* __restrict__ lengths, long long beats,
                                 int width, float* __restrict__ out) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= beats * width) return;
    long long b = idx / width;
    int t = (int)(idx - b * width);
    out[idx] = t < lengths[b] ? x[starts[b] + t] : 0.0f;
}

// The adaptive detector (detect.rs). slope[i] = (curv[i] - curv[i - 1])^2, slope[0] = 0.
extern "C" __global__ void squared_slope(const float* __restrict__ curv, long long n,
                                         float* __restrict__ slope) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = i == 0 ? 0.0f : __fsub_rn(curv[i], curv[i - 1]);
    slope[i] = __fmul_rn(d, d);
}

// energy[i] = sum of slope[i - w + 1 .. i], oldest first; samples before 0 count as nothing.
extern "C" __global__ void integrate(const float* __restrict__ slope, int w, long long n,
                                     float* __restrict__ energy) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (long long k = i + 1 - w; k <= i; ++k) {
        if (k >= 0) acc = __fadd_rn(acc, slope[k]);
    }
    energy[i] = acc;
}

// values[c] = src[idx[c] + shift]: the energy at each candidate.
extern "C" __global__ void gather_shifted(const float* __restrict__ src,
                                         const long long* __restrict__ idx, long long count,
                                         long long shift, float* __restrict__ values) {
    long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= count) return;
    values[c] = src[idx[c] + shift];
}

// peaks[b]: the first largest |curv| in [ends[b] + 1 - w, ends[b]] (clipped to the signal),
// less the filter delay, never below 0.
extern "C" __global__ void locate_peaks(const float* __restrict__ curv, long long n,
                                        const long long* __restrict__ ends, long long count,
                                        int w, long long delay, long long* __restrict__ peaks) {
    long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= count) return;
    long long end = ends[b];
    long long start = end + 1 - w;
    if (start < 0) start = 0;
    if (end > n - 1) end = n - 1;
    long long best = start;
    for (long long i = start; i <= end; ++i) {
        if (fabsf(curv[i]) > fabsf(curv[best])) best = i;
    }
    peaks[b] = best > delay ? best - delay : 0;
}
