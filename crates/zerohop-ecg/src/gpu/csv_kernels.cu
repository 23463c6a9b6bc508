// The CSV reader's device side, compiled at run time by NVRTC. The text of the data rows sits
// in device memory, padded with zero bytes to a whole number of tiles. Lines are found with a
// count, a scan of the per-tile counts (on the host: a few thousand numbers) and a scatter of
// line starts; then one thread per line splits its fields and converts the plain decimals
// exactly as the CPU reader's fast path does (csv/decimal.rs): a mantissa below 2^24 with at
// most ten fraction digits, divided by an exact power of ten with one IEEE division. Every
// other line (blank, a field count off, quotes around non-plain text, exponents, empty
// fields, junk) is listed for the host, which parses it with the CPU reader's own code, so
// results and error messages are the CPU reader's.

#define CSV_THREADS 256
// Bytes per thread: four 16-byte loads.
#define CSV_PER_THREAD 64
#define CSV_TILE (CSV_THREADS * CSV_PER_THREAD)

// Newlines among the 64 bytes at `p` (16-byte aligned).
__device__ __forceinline__ unsigned int newlines_in(const unsigned char* p) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
    unsigned int c = 0;
#pragma unroll
    for (int k = 0; k < CSV_PER_THREAD / 16; ++k) {
        uint4 w = v[k];
        c += __popc(__vcmpeq4(w.x, 0x0a0a0a0au)) + __popc(__vcmpeq4(w.y, 0x0a0a0a0au)) +
             __popc(__vcmpeq4(w.z, 0x0a0a0a0au)) + __popc(__vcmpeq4(w.w, 0x0a0a0a0au));
    }
    return c / 8;  // __vcmpeq4 sets all 8 bits of each equal byte
}

// counts[b] = newlines in tile b.
extern "C" __global__ void count_newlines(const unsigned char* __restrict__ text,
                                          unsigned long long* __restrict__ counts) {
    __shared__ unsigned int s[CSV_THREADS];
    long long at = (long long)blockIdx.x * CSV_TILE + (long long)threadIdx.x * CSV_PER_THREAD;
    s[threadIdx.x] = newlines_in(text + at);
    __syncthreads();
    for (int stride = CSV_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) counts[blockIdx.x] = s[0];
}

// starts[0] = 0, starts[k + 1] = one past newline k (in order; offsets[b] newlines come before
// tile b), starts[lines] = len + 1: line i spans [starts[i], starts[i + 1] - 1).
extern "C" __global__ void line_starts(const unsigned char* __restrict__ text, long long len,
                                       const unsigned long long* __restrict__ offsets,
                                       long long lines, unsigned long long* __restrict__ starts) {
    __shared__ unsigned int s[CSV_THREADS];
    long long at = (long long)blockIdx.x * CSV_TILE + (long long)threadIdx.x * CSV_PER_THREAD;
    unsigned int c = newlines_in(text + at);
    s[threadIdx.x] = c;
    __syncthreads();
    for (int stride = 1; stride < CSV_THREADS; stride <<= 1) {
        unsigned int add = threadIdx.x >= stride ? s[threadIdx.x - stride] : 0;
        __syncthreads();
        s[threadIdx.x] += add;
        __syncthreads();
    }
    unsigned long long k = offsets[blockIdx.x] + s[threadIdx.x] - c;
    for (int i = 0; i < CSV_PER_THREAD && c > 0; ++i) {
        if (text[at + i] == '\n') {
            starts[++k] = at + i + 1;
            --c;
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        starts[0] = 0;
        starts[lines] = len + 1;
    }
}

__device__ __forceinline__ bool is_space(unsigned char c) {
    // Rust's u8::is_ascii_whitespace: space, tab, LF, form feed, CR.
    return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r';
}

__constant__ float POW10[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

// csv/decimal.rs parse_plain_decimal on text[b, e): false where that returns None.
__device__ bool plain_decimal(const unsigned char* text, long long b, long long e, float* out) {
    if (b == e) return false;
    bool negative = text[b] == '-';
    if (text[b] == '-' || text[b] == '+') ++b;
    unsigned int mantissa = 0;
    int count = 0, fraction = 0;
    bool dot = false;
    for (; b < e; ++b) {
        unsigned char c = text[b];
        if (c >= '0' && c <= '9') {
            if (count == 9) return false;
            mantissa = mantissa * 10 + (c - '0');
            ++count;
            fraction += dot ? 1 : 0;
        } else if (c == '.' && !dot) {
            dot = true;
        } else {
            return false;
        }
    }
    if (count == 0 || mantissa >= (1u << 24) || fraction >= 11) return false;
    float value = __fdiv_rn((float)mantissa, POW10[fraction]);
    *out = negative ? -value : value;
    return true;
}

// A field as the CPU reader takes it without its slow path: trimmed, optionally inside one
// pair of matching quotes (" or ', when that is not the delimiter), then a plain decimal.
__device__ bool field_value(const unsigned char* text, long long b, long long e,
                            unsigned char delimiter, float* out) {
    while (b < e && is_space(text[b])) ++b;
    while (e > b && is_space(text[e - 1])) --e;
    if (e - b >= 2) {
        unsigned char q = text[b];
        if ((q == '"' || q == '\'') && text[e - 1] == q && q != delimiter) {
            ++b;
            --e;
            while (b < e && is_space(text[b])) ++b;
            while (e > b && is_space(text[e - 1])) --e;
        }
    }
    return plain_decimal(text, b, e, out);
}

// One thread per line: the selected fields (slots[f] >= 0: column slots[f]) of line i go to
// row i of their columns; a line the device cannot take is appended to `host` as
// (line, begin, end) while fewer than `capacity` are there, and `host_count` counts them all.
extern "C" __global__ void parse_lines(const unsigned char* __restrict__ text,
                                       const unsigned long long* __restrict__ starts,
                                       long long lines, int width, unsigned char delimiter,
                                       const int* __restrict__ slots, float** columns,
                                       unsigned long long* __restrict__ host,
                                       unsigned long long capacity,
                                       unsigned long long* __restrict__ host_count) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= lines) return;
    long long begin = (long long)starts[i];
    long long end = (long long)starts[i + 1] - 1;
    long long e = end;
    if (e > begin && text[e - 1] == '\r') --e;
    bool blank = true;
    for (long long p = begin; p < e && blank; ++p) blank = is_space(text[p]);
    bool ok = !blank;
    int field = 0;
    long long from = begin;
    for (long long p = begin; ok; ++p) {
        if (p == e || text[p] == delimiter) {
            if (field < width && slots[field] >= 0) {
                float v;
                if (field_value(text, from, p, delimiter, &v)) {
                    columns[slots[field]][i] = v;
                } else {
                    ok = false;
                }
            }
            ++field;
            from = p + 1;
            if (p == e) break;
        }
    }
    if (ok && field == width) return;
    unsigned long long k = atomicAdd(host_count, 1ull);
    if (k < capacity) {
        host[3 * k] = i;
        host[3 * k + 1] = begin;
        host[3 * k + 2] = end;
    }
}

// columns[c][rows[k]] = values[k * ncols + c]: the rows the host parsed.
extern "C" __global__ void scatter_rows(const unsigned long long* __restrict__ rows,
                                        const float* __restrict__ values, long long count,
                                        int ncols, float** columns) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= count * ncols) return;
    long long k = idx / ncols;
    int c = (int)(idx - k * ncols);
    columns[c][rows[k]] = values[idx];
}
