// The EDF/BDF reader's device side, compiled at run time by NVRTC. The file's data records
// sit in device memory as the file has them (every signal of a record, then the next record);
// one thread per output sample finds its record and place, decodes the 16- or 24-bit
// little-endian value and scales it in double precision exactly as the CPU reader does
// (digital × gain + offset, rounded once to float), so the results are bitwise the CPU's.

#define EDF_THREADS 256

// out[i] for i < n: sample i % per_record of record i / per_record of the signal at byte
// `offset` of each record. at_limits counts samples at the digital minimum or maximum.
extern "C" __global__ void edf_scale(const unsigned char* __restrict__ data,
                                     unsigned long long record_bytes,
                                     unsigned long long offset,
                                     unsigned long long per_record,
                                     unsigned int width,
                                     unsigned long long n,
                                     double gain, double zero, int low, int high,
                                     float* __restrict__ out,
                                     unsigned long long* __restrict__ at_limits) {
    unsigned long long i = (unsigned long long)blockIdx.x * EDF_THREADS + threadIdx.x;
    int limit = 0;
    if (i < n) {
        unsigned long long r = i / per_record;
        const unsigned char* p = data + r * record_bytes + offset + (i - r * per_record) * width;
        int d = width == 2
            ? (int)(short)(p[0] | (p[1] << 8))
            : ((int)((unsigned)p[0] << 8 | (unsigned)p[1] << 16 | (unsigned)p[2] << 24)) >> 8;
        limit = d <= low || d >= high;
        out[i] = (float)__dadd_rn(__dmul_rn((double)d, gain), zero);
    }
    int counted = __syncthreads_count(limit);
    if (threadIdx.x == 0 && counted) atomicAdd(at_limits, (unsigned long long)counted);
}

// out[r × len + j] = byte j of the `len` bytes at `offset` of record r, for r < records:
// the annotation signal's bytes gathered, so only they travel back to the host.
extern "C" __global__ void edf_gather_bytes(const unsigned char* __restrict__ data,
                                            unsigned long long record_bytes,
                                            unsigned long long offset,
                                            unsigned long long len,
                                            unsigned long long total,
                                            unsigned char* __restrict__ out) {
    unsigned long long i = (unsigned long long)blockIdx.x * EDF_THREADS + threadIdx.x;
    if (i < total) {
        unsigned long long r = i / len;
        out[i] = data[r * record_bytes + offset + (i - r * len)];
    }
}
