/*
 * proto._codec: the compiled half of the record batch codec (proto/record_batch.py).
 *
 * Theory of operation
 * -------------------
 * The leader validates every record of every batch it appends (Kafka's LogValidator, SPEC S13.1).
 * Done in Python that costs microseconds per record; here it is a single pass over the bytes:
 *
 *   validate(buf, deep, max_batch_bytes, min_ts, max_ts)
 *       -> (batches, record_count, offset_count, max_timestamp, shallow_offset_of_max_timestamp,
 *           positions of the compressed batches whose records are still to be checked)
 *       Walks the batches of ``buf``: framing, magic, CRC-32C, attributes, counts, producer
 *       fields and - in ``deep`` mode, for uncompressed batches - every record's framing
 *       (varints within bounds, offset deltas 0..n-1, key/value/header lengths, no trailing
 *       bytes, timestamps within [min_ts, max_ts], max_timestamp equal to the records' maximum).
 *       Compressed batches are returned with ``needs_records`` set: Python decompresses them with
 *       a hard output bound and calls check_records on the result.
 *   check_records(section, count, base_ts, batch_max_ts, min_ts, max_ts, position)
 *       The record walk alone, over an (already decompressed) records section.
 *   crc32c(buf) -> int
 *       CRC-32C (Castagnoli): SSE 4.2 with three interleaved streams where the CPU has it
 *       (Mark Adler's construction), a table otherwise.
 *
 * Errors are raised as the project's typed errors (CorruptMessageError, InvalidRecordError,
 * MessageTooLargeError, InvalidTimestampError, UnsupportedCompressionTypeError), handed in once
 * by set_error_classes() so that this file needs no knowledge of proto.errors. The rules, their
 * order and the error classes are the same as the pure-Python fallback in proto/record_batch.py;
 * tests/unit/test_record_validation.py checks both agree on generated batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* ------------------------------------------------------------------ layout (docs/record-batch.md) */

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define ATTRIBUTES_OFFSET 21
#define MAGIC 2
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define TRANSACTIONAL_MASK 0x10
#define CONTROL_MASK 0x20
#define KNOWN_ATTRIBUTES 0x3F
/* attributes, timestamp delta, offset delta, key length, value length, header count: one byte each */
#define MIN_RECORD_BODY 6

static PyObject *CorruptMessage, *InvalidRecord, *MessageTooLarge, *InvalidTimestamp, *UnsupportedCodec;
/* proto.record_batch.BatchInfo, a NamedTuple: instances are made here, without a Python call each. */
static PyTypeObject *BatchInfoType;

/* ------------------------------------------------------------------ CRC-32C */

#define POLY 0x82f63b78u
static uint32_t crc_table[8][256];

static void crc_table_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ POLY : crc >> 1;
        crc_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            crc = crc_table[0][crc & 0xff] ^ (crc >> 8);
            crc_table[k][n] = crc;
        }
    }
}

static uint32_t crc32c_sw(uint32_t crc, const unsigned char *p, size_t len) {
    crc = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;  /* little-endian hosts: the CRC is reflected, so the low byte goes first */
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^ crc_table[5][(w >> 16) & 0xff] ^
              crc_table[4][(w >> 24) & 0xff] ^ crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if HAVE_X86
/* Three streams in parallel hide the crc32 instruction's latency; the partial CRCs are combined by
 * "shifting" them over the bytes that follow (multiplication by x^(8*len) mod P, as tables). */
#define LONG_BLOCK 8192
#define MEDIUM_BLOCK 2048
#define SHORT_BLOCK 256
static uint32_t crc_long[4][256], crc_medium[4][256], crc_short[4][256];
static int have_sse42 = 0;

static uint32_t gf2_matrix_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_matrix_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_matrix_times(mat, mat[n]);
}

static void zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    uint32_t row = 1;
    odd[0] = POLY;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_matrix_square(even, odd);
    gf2_matrix_square(odd, even);
    do {
        gf2_matrix_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_matrix_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void zeros_table(uint32_t zeros[][256], size_t len) {
    uint32_t op[32];
    zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_matrix_times(op, n);
        zeros[1][n] = gf2_matrix_times(op, n << 8);
        zeros[2][n] = gf2_matrix_times(op, n << 16);
        zeros[3][n] = gf2_matrix_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static inline uint64_t crc_three_streams(uint64_t crc0,
                                                                            const unsigned char **pnext,
                                                                            size_t block, uint32_t zeros[][256]) {
    const unsigned char *next = *pnext;
    uint64_t crc1 = 0, crc2 = 0;
    const unsigned char *end = next + block;
    do {
        uint64_t a, b, c;
        memcpy(&a, next, 8);
        memcpy(&b, next + block, 8);
        memcpy(&c, next + 2 * block, 8);
        crc0 = _mm_crc32_u64(crc0, a);
        crc1 = _mm_crc32_u64(crc1, b);
        crc2 = _mm_crc32_u64(crc2, c);
        next += 8;
    } while (next < end);
    crc0 = crc_shift(zeros, (uint32_t)crc0) ^ crc1;
    crc0 = crc_shift(zeros, (uint32_t)crc0) ^ crc2;
    *pnext = next + 2 * block;
    return crc0;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const unsigned char *next,
                                                             size_t len) {
    uint64_t crc0 = crc ^ 0xffffffffu;
    while (len && ((uintptr_t)next & 7)) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    while (len >= LONG_BLOCK * 3) {
        crc0 = crc_three_streams(crc0, &next, LONG_BLOCK, crc_long);
        len -= 3 * LONG_BLOCK;
    }
    while (len >= MEDIUM_BLOCK * 3) {
        crc0 = crc_three_streams(crc0, &next, MEDIUM_BLOCK, crc_medium);
        len -= 3 * MEDIUM_BLOCK;
    }
    while (len >= SHORT_BLOCK * 3) {
        crc0 = crc_three_streams(crc0, &next, SHORT_BLOCK, crc_short);
        len -= 3 * SHORT_BLOCK;
    }
    while (len >= 8) {
        uint64_t a;
        memcpy(&a, next, 8);
        crc0 = _mm_crc32_u64(crc0, a);
        next += 8;
        len -= 8;
    }
    while (len) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    return (uint32_t)crc0 ^ 0xffffffffu;
}
#endif

static uint32_t crc32c(const unsigned char *p, size_t len) {
#if HAVE_X86
    if (have_sse42) return crc32c_hw(0, p, len);
#endif
    return crc32c_sw(0, p, len);
}

/* ------------------------------------------------------------------ big-endian reads */

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* ------------------------------------------------------------------ varints (zig-zag, Kafka's ByteUtils) */

/* Returns 0 on success; -1 truncated; -2 too long / out of range. */
static inline int read_varint32(const unsigned char **pp, const unsigned char *end, int32_t *out) {
    const unsigned char *p = *pp;
    if (p < end && !(p[0] & 0x80)) { /* the common one-byte case */
        uint32_t z = p[0];
        *out = (int32_t)((z >> 1) ^ (~(z & 1) + 1));
        *pp = p + 1;
        return 0;
    }
    uint64_t z = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end) return -1;
        unsigned char b = *p++;
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (z > 0xffffffffu) return -2;
            uint32_t u = (uint32_t)z;
            *out = (int32_t)((u >> 1) ^ (~(u & 1) + 1));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

static inline int read_varint64(const unsigned char **pp, const unsigned char *end, int64_t *out) {
    const unsigned char *p = *pp;
    if (p < end && !(p[0] & 0x80)) {
        uint64_t z = p[0];
        *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
        *pp = p + 1;
        return 0;
    }
    uint64_t z = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return -1;
        unsigned char b = *p++;
        if (shift == 63 && (b & 0x7e)) return -2; /* more than 64 bits */
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

/* ------------------------------------------------------------------ the record walk */

/* Error paths are cold: keeping PyErr_Format out of line keeps the record loop in registers. */
__attribute__((cold, noinline)) static void fail(PyObject *cls, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    PyErr_FormatV(cls, fmt, args);
    va_end(args);
}
#define FAIL(cls, ...) do { fail(cls, __VA_ARGS__); return -1; } while (0)
#define VARINT_FAIL(rc, what) \
    FAIL(CorruptMessage, "batch at position %zd: record %d: %s varint is %s", position, i, what, \
         (rc) == -1 ? "truncated" : "too long")

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Raw zig-zag values ("z", before decoding) of the varint at p. The one- and two-byte encodings
 * (nearly every length, delta and count in practice) are decoded inline - with branches, not
 * arithmetic on the loaded bytes, so the CPU runs ahead on the predicted position; the rest, and anything near the end of the buffer, go through
 * read_varint32/64, which check every byte against ``lim``. The inline path reads without a bound:
 * ``fast`` says at least 2 bytes are readable, and a field that runs past its record is caught by the
 * length checks that follow (a position beyond rec_end makes every "n > rec_end - p" fail). */
#define ZIGZAG32(n) ((uint32_t)(((uint32_t)(n) << 1) ^ (uint32_t)((int32_t)(n) >> 31)))
#define ZIGZAG64(n) ((uint64_t)(((uint64_t)(n) << 1) ^ (uint64_t)((int64_t)(n) >> 63)))
#define UNZIGZAG64(z) ((int64_t)(((uint64_t)(z) >> 1) ^ (0ull - ((uint64_t)(z) & 1))))

#define RAW_VARINT32(z, lim, what) do { \
    if (LIKELY(fast && !(p[0] & 0x80))) { \
        z = p[0]; \
        p += 1; \
    } else if (LIKELY(fast && !(p[1] & 0x80))) { \
        z = (uint32_t)(p[0] & 0x7f) | ((uint32_t)p[1] << 7); \
        p += 2; \
    } else { \
        int32_t v_; \
        if ((rc = read_varint32(&p, (lim), &v_))) VARINT_FAIL(rc, what); \
        z = ZIGZAG32(v_); \
    } \
} while (0)

#define RAW_VARINT64(z, lim, what) do { \
    if (LIKELY(fast && !(p[0] & 0x80))) { \
        z = p[0]; \
        p += 1; \
    } else if (LIKELY(fast && !(p[1] & 0x80))) { \
        z = (uint32_t)(p[0] & 0x7f) | ((uint32_t)p[1] << 7); \
        p += 2; \
    } else { \
        int64_t v_; \
        if ((rc = read_varint64(&p, (lim), &v_))) VARINT_FAIL(rc, what); \
        z = ZIGZAG64(v_); \
    } \
} while (0)

/* A nullable length's raw value: 1 is null (-1), even values are lengths, other odd values negative. */
#define NULLABLE_LENGTH(z) ((z) == 1 ? 0 : ((z) & 1) ? -1 : (int64_t)((z) >> 1))

/* Checks ``count`` records in [p, end); returns 0 or -1 with the error set. */
static int walk_records(const unsigned char *p, const unsigned char *end, int32_t count, int64_t base_ts,
                        int64_t batch_max_ts, int64_t min_ts, int64_t max_ts, Py_ssize_t position) {
    int64_t seen_max = INT64_MIN;
    int rc;
    for (int32_t i = 0; i < count; i++) {
        /* Every inline read below stays within 32 bytes of the record start or of a checked position. */
        int fast = end - p >= 32;
        uint32_t z;
        RAW_VARINT32(z, end, "length");
        if (UNLIKELY((z & 1) || (z >> 1) < MIN_RECORD_BODY || (int64_t)(z >> 1) > end - p))
            FAIL(CorruptMessage, "batch at position %zd: record %d has length %d, %zd bytes left", position, i,
                 (int32_t)UNZIGZAG64(z), (Py_ssize_t)(end - p));
        const unsigned char *rec_end = p + (z >> 1);
        fast = rec_end - p >= 16 && end - p >= 32;
        p++; /* record attributes: unused by Kafka 2.x */
        uint64_t zts;
        RAW_VARINT64(zts, rec_end, "timestamp delta");
        int64_t ts_delta = UNZIGZAG64(zts);
        RAW_VARINT32(z, rec_end, "offset delta");
        if (UNLIKELY(z != 2u * (uint32_t)i))
            FAIL(InvalidRecord, "batch at position %zd: record %d has offset delta %d, expected %d", position, i,
                 (int32_t)UNZIGZAG64(z), i);
        RAW_VARINT32(z, rec_end, "key length");
        int64_t n = NULLABLE_LENGTH(z);
        if (UNLIKELY(n < 0 || n > rec_end - p))
            FAIL(CorruptMessage, "batch at position %zd: record %d has key length %d", position, i,
                 (int32_t)UNZIGZAG64(z));
        p += n;
        fast = end - p >= 16;
        RAW_VARINT32(z, rec_end, "value length");
        n = NULLABLE_LENGTH(z);
        if (UNLIKELY(n < 0 || n > rec_end - p))
            FAIL(CorruptMessage, "batch at position %zd: record %d has value length %d", position, i,
                 (int32_t)UNZIGZAG64(z));
        p += n;
        fast = end - p >= 16;
        RAW_VARINT32(z, rec_end, "header count");
        if (UNLIKELY(z != 0)) {
            int64_t headers = (z & 1) ? -1 : (int64_t)(z >> 1);
            if (UNLIKELY(headers < 0 || headers * 2 > rec_end - p))
                FAIL(CorruptMessage, "batch at position %zd: record %d has header count %d", position, i,
                     (int32_t)UNZIGZAG64(z));
            for (int64_t h = 0; h < headers; h++) {
                fast = end - p >= 16;
                RAW_VARINT32(z, rec_end, "header key length");
                n = (z & 1) ? -1 : (int64_t)(z >> 1);
                if (UNLIKELY(n < 0 || n > rec_end - p))
                    FAIL(CorruptMessage, "batch at position %zd: record %d has header key length %d", position, i,
                         (int32_t)UNZIGZAG64(z));
                p += n;
                fast = end - p >= 16;
                RAW_VARINT32(z, rec_end, "header value length");
                n = NULLABLE_LENGTH(z);
                if (UNLIKELY(n < 0 || n > rec_end - p))
                    FAIL(CorruptMessage, "batch at position %zd: record %d has header value length %d", position,
                         i, (int32_t)UNZIGZAG64(z));
                p += n;
            }
        }
        if (UNLIKELY(p != rec_end))
            FAIL(CorruptMessage, "batch at position %zd: record %d has %zd bytes beyond its fields", position, i,
                 (Py_ssize_t)(rec_end - p));
        int64_t ts;
        if (UNLIKELY(__builtin_add_overflow(base_ts, ts_delta, &ts) || ts < min_ts || ts > max_ts))
            FAIL(InvalidTimestamp,
                 "batch at position %zd: record %d has timestamp %lld + delta %lld, outside [%lld, %lld]", position, i,
                 (long long)base_ts, (long long)ts_delta, (long long)min_ts, (long long)max_ts);
        if (ts > seen_max) seen_max = ts;
        /* p == rec_end here; taking rec_end makes the next record depend only on this record's length
         * (not on the chain through every field), so the CPU overlaps consecutive records. */
        p = rec_end;
    }
    if (UNLIKELY(p != end))
        FAIL(CorruptMessage, "batch at position %zd: %zd bytes after the last record", position,
             (Py_ssize_t)(end - p));
    if (UNLIKELY(seen_max != batch_max_ts))
        FAIL(InvalidRecord, "batch at position %zd: max_timestamp %lld is not the records' maximum %lld", position,
             (long long)batch_max_ts, (long long)seen_max);
    return 0;
}

/* ------------------------------------------------------------------ module functions */

static PyObject *py_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c(view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_check_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    int count;
    long long base_ts, batch_max_ts, min_ts, max_ts;
    Py_ssize_t position;
    if (!PyArg_ParseTuple(args, "y*iLLLLn", &view, &count, &base_ts, &batch_max_ts, &min_ts, &max_ts, &position))
        return NULL;
    const unsigned char *p = view.buf;
    int rc = walk_records(p, p + view.len, count, base_ts, batch_max_ts, min_ts, max_ts, position);
    PyBuffer_Release(&view);
    if (rc) return NULL;
    Py_RETURN_NONE;
}

/* validate(buf, deep, max_batch_bytes, min_ts, max_ts): see the module comment. */
static PyObject *py_validate(PyObject *self, PyObject *args) {
    Py_buffer view;
    int deep;
    long long max_batch_bytes, min_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*pLLL", &view, &deep, &max_batch_bytes, &min_ts, &max_ts)) return NULL;
    PyObject *out = PyList_New(0), *pending = PyList_New(0);
    if (out == NULL || pending == NULL) {
        Py_XDECREF(out);
        Py_XDECREF(pending);
        PyBuffer_Release(&view);
        return NULL;
    }
    long long record_count = 0, offset_count = 0, max_timestamp = -1, max_timestamp_delta = 0;
    const unsigned char *buf = view.buf;
    Py_ssize_t total = view.len, pos = 0;
    if (total == 0) {
        PyErr_SetString(CorruptMessage, "empty record set");
        goto fail;
    }
    while (pos < total) {
        if (total - pos < HEADER_SIZE) {
            PyErr_Format(CorruptMessage, "truncated batch header at position %zd", pos);
            goto fail;
        }
        const unsigned char *h = buf + pos;
        int64_t base_offset = be64(h);
        int32_t length = be32(h + 8);
        int32_t partition_leader_epoch = be32(h + 12);
        int magic = (signed char)h[16];
        uint32_t crc = (uint32_t)be32(h + 17);
        int attributes = (uint16_t)be16(h + 21);
        int32_t last_delta = be32(h + 23);
        int64_t base_ts = be64(h + 27), batch_max_ts = be64(h + 35), producer_id = be64(h + 43);
        int producer_epoch = be16(h + 51);
        int32_t base_sequence = be32(h + 53), count = be32(h + 57);
        if (length < HEADER_SIZE - LOG_OVERHEAD || (Py_ssize_t)length + LOG_OVERHEAD > total - pos) {
            PyErr_Format(CorruptMessage, "batch at position %zd has bad length %d", pos, length);
            goto fail;
        }
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (magic != MAGIC) {
            PyErr_Format(CorruptMessage, "batch at position %zd has magic %d, expected %d", pos, magic, MAGIC);
            goto fail;
        }
        uint32_t actual;
        Py_BEGIN_ALLOW_THREADS
        actual = crc32c(h + ATTRIBUTES_OFFSET, (size_t)(size - ATTRIBUTES_OFFSET));
        Py_END_ALLOW_THREADS
        if (actual != crc) {
            PyErr_Format(CorruptMessage, "batch at position %zd failed its CRC-32C check", pos);
            goto fail;
        }
        if (max_batch_bytes >= 0 && size > max_batch_bytes) {
            PyErr_Format(MessageTooLarge, "batch of %zd bytes exceeds max.message.bytes=%lld", size, max_batch_bytes);
            goto fail;
        }
        int codec = attributes & CODEC_MASK;
        if (codec < 0 || codec > 4) {  /* none, gzip, snappy, lz4, zstd */
            PyErr_Format(UnsupportedCodec, "compression codec %d is not supported", codec);
            goto fail;
        }
        if (deep) {
            if (attributes & ~KNOWN_ATTRIBUTES) {
                PyErr_Format(InvalidRecord, "batch at position %zd has unknown attribute bits 0x%x", pos, attributes);
                goto fail;
            }
            if (attributes & CONTROL_MASK) {
                /* Kafka's LogValidator: control batches enter a log only through WriteTxnMarkers. */
                PyErr_Format(InvalidRecord,
                             "batch at position %zd is a control batch: clients may not write control records", pos);
                goto fail;
            }
            if ((attributes & TRANSACTIONAL_MASK) && producer_id < 0) {
                PyErr_Format(InvalidRecord, "batch at position %zd is transactional without a producer id", pos);
                goto fail;
            }
            if (attributes & TIMESTAMP_TYPE_MASK) {
                PyErr_Format(InvalidRecord, "batch at position %zd claims LogAppendTime: producers send CreateTime",
                             pos);
                goto fail;
            }
            if (last_delta < 0 || count <= 0 || (int64_t)count != (int64_t)last_delta + 1) {
                PyErr_Format(InvalidRecord,
                             "batch at position %zd: record_count %d inconsistent with last_offset_delta %d", pos,
                             count, last_delta);
                goto fail;
            }
            if (producer_id >= 0 ? (producer_epoch < 0 || base_sequence < 0)
                                 : (producer_id != -1 || producer_epoch != -1 || base_sequence != -1)) {
                PyErr_Format(InvalidRecord, "batch at position %zd has inconsistent producer fields (id %lld, "
                             "epoch %d, sequence %d)", pos, (long long)producer_id, producer_epoch, base_sequence);
                goto fail;
            }
            if (codec == 0) {
                if ((int64_t)count * (MIN_RECORD_BODY + 1) > size - HEADER_SIZE) {
                    PyErr_Format(CorruptMessage, "batch at position %zd: %d records cannot fit in %zd bytes", pos,
                                 count, size - HEADER_SIZE);
                    goto fail;
                }
                if (walk_records(h + HEADER_SIZE, h + size, count, base_ts, batch_max_ts, min_ts, max_ts, pos))
                    goto fail;
            }
        } else if (last_delta < 0 || count < 0 || (count && (int64_t)last_delta + 1 < count)) {
            PyErr_Format(InvalidRecord, "batch at position %zd: record_count %d inconsistent with last_offset_delta %d",
                         pos, count, last_delta);
            goto fail;
        }
        if (batch_max_ts > max_timestamp) {
            max_timestamp = batch_max_ts;
            max_timestamp_delta = offset_count + last_delta;
        }
        record_count += count;
        offset_count += (long long)last_delta + 1;
        if (deep && codec != 0) {
            PyObject *where = PyLong_FromSsize_t(pos);
            if (where == NULL) goto fail;
            int rc = PyList_Append(pending, where);
            Py_DECREF(where);
            if (rc) goto fail;
        }
        PyObject *fields = Py_BuildValue("(nnLiiiLLLiii)", pos, size, (long long)base_offset, last_delta, count,
                                         partition_leader_epoch,
                                         (long long)base_ts, (long long)batch_max_ts, (long long)producer_id,
                                         producer_epoch, base_sequence, attributes);
        if (fields == NULL) goto fail;
        PyObject *item = fields;
        if (BatchInfoType != NULL) {
            PyObject *call_args = PyTuple_Pack(1, fields);
            Py_DECREF(fields);
            if (call_args == NULL) goto fail;
            item = PyTuple_Type.tp_new(BatchInfoType, call_args, NULL);
            Py_DECREF(call_args);
            if (item == NULL) goto fail;
        }
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc) goto fail;
        pos += size;
    }
    PyBuffer_Release(&view);
    PyObject *batches = PyList_AsTuple(out);
    Py_DECREF(out);
    if (batches == NULL) {
        Py_DECREF(pending);
        return NULL;
    }
    return Py_BuildValue("(NLLLLN)", batches, record_count, offset_count, max_timestamp, max_timestamp_delta,
                         pending);
fail:
    PyBuffer_Release(&view);
    Py_DECREF(out);
    Py_DECREF(pending);
    return NULL;
}

static PyObject *py_set_error_classes(PyObject *self, PyObject *args) {
    PyObject *a, *b, *c, *d, *e;
    if (!PyArg_ParseTuple(args, "OOOOO", &a, &b, &c, &d, &e)) return NULL;
    Py_XSETREF(CorruptMessage, Py_NewRef(a));
    Py_XSETREF(InvalidRecord, Py_NewRef(b));
    Py_XSETREF(MessageTooLarge, Py_NewRef(c));
    Py_XSETREF(InvalidTimestamp, Py_NewRef(d));
    Py_XSETREF(UnsupportedCodec, Py_NewRef(e));
    Py_RETURN_NONE;
}

static PyObject *py_set_batch_info_class(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "BatchInfo must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(BatchInfoType, (PyTypeObject *)Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyObject *py_has_hardware_crc(PyObject *self, PyObject *unused) {
#if HAVE_X86
    return PyBool_FromLong(have_sse42);
#else
    Py_RETURN_FALSE;
#endif
}

/* ------------------------------------------------------------------ record encoding (producer)
 * encode_record / encode_records build the uncompressed records section the producer frames with
 * build_batch. They are byte-for-byte twins of proto.record_batch's _encode_record_body_py and
 * _encode_records_py (tests/unit/test_record_encode.py proves it with hypothesis). Each record is
 * sized first (varints have a known length) so it is written once, straight into the result. */

typedef struct { char *p; Py_ssize_t len, cap; } Out;

static int out_reserve(Out *o, Py_ssize_t n) {
    if (o->len + n <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n) cap *= 2;
    char *q = PyMem_Realloc(o->p, (size_t)cap);
    if (!q) { PyErr_NoMemory(); return -1; }
    o->p = q; o->cap = cap;
    return 0;
}

static inline int zz_len(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

static inline char *zz_put(char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) { *p++ = (char)((z & 0x7F) | 0x80); z >>= 7; }
    *p++ = (char)z;
    return p;
}

/* A bytes-like or None field: data/len, len == -1 for None. The buffer must be released. */
static int get_field(PyObject *o, Py_buffer *view, const char *what) {
    view->obj = NULL;
    view->len = -1;
    view->buf = NULL;
    if (o == Py_None) return 0;
    if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "record %s must be bytes-like or None", what);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static inline void release_field(Py_buffer *view) { if (view->obj) PyBuffer_Release(view); }

static inline Py_ssize_t field_size(Py_ssize_t n) { return n < 0 ? 1 : zz_len(n) + n; }

static inline char *field_put(char *p, const Py_buffer *v) {
    if (v->len < 0) return zz_put(p, -1);
    p = zz_put(p, v->len);
    if (v->len) memcpy(p, v->buf, (size_t)v->len);
    return p + v->len;
}

/* Append one record (length prefix included) to o. headers: a sequence of objects with .key (str)
 * and .value (bytes or None), or NULL/empty. */
static int append_record(Out *o, int64_t offset_delta, int64_t ts_delta, PyObject *key, PyObject *value,
                         PyObject *headers) {
    Py_buffer k, v;
    int rc = -1;
    PyObject *hseq = NULL;
    Py_ssize_t nh = 0;
    Py_buffer *hv = NULL;
    PyObject **hk = NULL;
    if (get_field(key, &k, "key") < 0) return -1;
    if (get_field(value, &v, "value") < 0) { release_field(&k); return -1; }
    if (headers && headers != Py_None) {
        hseq = PySequence_Fast(headers, "headers must be a sequence");
        if (!hseq) goto done;
        nh = PySequence_Fast_GET_SIZE(hseq);
    }
    Py_ssize_t body = 1 + zz_len(ts_delta) + zz_len(offset_delta) + field_size(k.len) + field_size(v.len) + zz_len(nh);
    if (nh) {
        hv = PyMem_Calloc((size_t)nh, sizeof(Py_buffer));
        hk = PyMem_Calloc((size_t)nh, sizeof(PyObject *));
        if (!hv || !hk) { PyErr_NoMemory(); goto done; }
        for (Py_ssize_t i = 0; i < nh; i++) {
            PyObject *h = PySequence_Fast_GET_ITEM(hseq, i);
            PyObject *hkey = PyObject_GetAttrString(h, "key");
            if (!hkey) goto done;
            if (!PyUnicode_Check(hkey)) {
                Py_DECREF(hkey);
                PyErr_SetString(PyExc_TypeError, "header key must be str");
                goto done;
            }
            hk[i] = PyUnicode_AsUTF8String(hkey);
            Py_DECREF(hkey);
            if (!hk[i]) goto done;
            PyObject *hval = PyObject_GetAttrString(h, "value");
            if (!hval) goto done;
            int r = get_field(hval, &hv[i], "header value");
            Py_DECREF(hval);
            if (r < 0) goto done;
            body += field_size(PyBytes_GET_SIZE(hk[i])) + field_size(hv[i].len);
        }
    }
    if (out_reserve(o, zz_len(body) + body) < 0) goto done;
    char *p = o->p + o->len;
    p = zz_put(p, body);
    *p++ = 0;  /* attributes */
    p = zz_put(p, ts_delta);
    p = zz_put(p, offset_delta);
    p = field_put(p, &k);
    p = field_put(p, &v);
    p = zz_put(p, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        Py_ssize_t n = PyBytes_GET_SIZE(hk[i]);
        p = zz_put(p, n);
        memcpy(p, PyBytes_AS_STRING(hk[i]), (size_t)n);
        p += n;
        p = field_put(p, &hv[i]);
    }
    o->len = p - o->p;
    rc = 0;
done:
    release_field(&k);
    release_field(&v);
    for (Py_ssize_t i = 0; hv && i < nh; i++) release_field(&hv[i]);
    for (Py_ssize_t i = 0; hk && i < nh; i++) Py_XDECREF(hk[i]);
    PyMem_Free(hv);
    PyMem_Free(hk);
    Py_XDECREF(hseq);
    return rc;
}

static PyObject *out_bytes(Out *o) {
    PyObject *r = PyBytes_FromStringAndSize(o->p ? o->p : "", o->len);
    PyMem_Free(o->p);
    return r;
}

static PyObject *py_encode_record(PyObject *self, PyObject *args) {
    long long od, td;
    PyObject *key, *value, *headers = NULL;
    if (!PyArg_ParseTuple(args, "LLOO|O", &od, &td, &key, &value, &headers)) return NULL;
    Out o = {NULL, 0, 0};
    if (append_record(&o, od, td, key, value, headers) < 0) { PyMem_Free(o.p); return NULL; }
    return out_bytes(&o);
}

/* encode_records(values, keys_or_None, timestamp_delta_or_list, first_offset_delta) -> bytes */
static PyObject *py_encode_records(PyObject *self, PyObject *args) {
    PyObject *values, *keys, *ts;
    long long first;
    if (!PyArg_ParseTuple(args, "OOOL", &values, &keys, &ts, &first)) return NULL;
    PyObject *vs = PySequence_Fast(values, "values must be a sequence");
    if (!vs) return NULL;
    PyObject *ks = NULL, *tss = NULL;
    Out o = {NULL, 0, 0};
    Py_ssize_t n = PySequence_Fast_GET_SIZE(vs);
    long long ts_const = 0;
    if (keys != Py_None) {
        ks = PySequence_Fast(keys, "keys must be a sequence or None");
        if (!ks) goto fail;
        if (PySequence_Fast_GET_SIZE(ks) != n) {
            PyErr_SetString(PyExc_ValueError, "keys and values differ in length");
            goto fail;
        }
    }
    if (PyLong_Check(ts)) {
        ts_const = PyLong_AsLongLong(ts);
        if (ts_const == -1 && PyErr_Occurred()) goto fail;
    } else {
        tss = PySequence_Fast(ts, "timestamp deltas must be an int or a sequence");
        if (!tss) goto fail;
        if (PySequence_Fast_GET_SIZE(tss) != n) {
            PyErr_SetString(PyExc_ValueError, "timestamp deltas and values differ in length");
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long td = ts_const;
        if (tss) {
            td = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(tss, i));
            if (td == -1 && PyErr_Occurred()) goto fail;
        }
        PyObject *key = ks ? PySequence_Fast_GET_ITEM(ks, i) : Py_None;
        if (append_record(&o, first + i, td, key, PySequence_Fast_GET_ITEM(vs, i), NULL) < 0) goto fail;
    }
    Py_DECREF(vs);
    Py_XDECREF(ks);
    Py_XDECREF(tss);
    return out_bytes(&o);
fail:
    PyMem_Free(o.p);
    Py_DECREF(vs);
    Py_XDECREF(ks);
    Py_XDECREF(tss);
    return NULL;
}

/* ------------------------------------------------------------------ RecordsBuilder (producer)
 * One open producer batch's records section, grown in place: try_append encodes a record straight
 * into the builder's buffer (no bytes object per record), keeps count/base/max timestamp and
 * returns factory(result, offset_delta, timestamp) - the record's future - in the same C call.
 * The producer's per-record path is then one call. Twin: proto.record_batch._RecordsBuilderPy
 * (tests/unit/test_record_encode.py checks both give identical bytes, counts and refusals). */

/* RecordFuture: the base of the producer's per-record future (client.futures.FutureRecordMetadata):
 * the batch's shared result, the record's offset delta in the batch and its timestamp. A C base so
 * that try_append creates it without running Python (one allocation, three fields). */
typedef struct {
    PyObject_HEAD
    PyObject *result;
    long long rel, ts;
} RecordFuture;

static int rf_traverse(RecordFuture *self, visitproc visit, void *arg) {
    Py_VISIT(self->result);
    return 0;
}

static int rf_clear(RecordFuture *self) {
    Py_CLEAR(self->result);
    return 0;
}

static void rf_dealloc(RecordFuture *self) {
    /* For a Python subclass, subtype_dealloc calls this and then drops its reference to the
     * (heap) type itself: nothing to do about the type here. */
    PyObject_GC_UnTrack(self);
    rf_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int rf_init(RecordFuture *self, PyObject *args, PyObject *kwds) {
    PyObject *result;
    long long rel, ts;
    static char *kwlist[] = {"result", "relative_offset", "timestamp", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OLL", kwlist, &result, &rel, &ts)) return -1;
    Py_XSETREF(self->result, Py_NewRef(result));
    self->rel = rel;
    self->ts = ts;
    return 0;
}

static PyMemberDef rf_members[] = {
    {"_mk_result", T_OBJECT_EX, offsetof(RecordFuture, result), READONLY, "the batch's shared result"},
    {"_mk_rel", T_LONGLONG, offsetof(RecordFuture, rel), READONLY, "the record's offset delta in its batch"},
    {"_mk_ts", T_LONGLONG, offsetof(RecordFuture, ts), READONLY, "the record's timestamp"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proto._codec.RecordFuture",
    .tp_basicsize = sizeof(RecordFuture),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "RecordFuture(result, relative_offset, timestamp): base of the producer's record future.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rf_init,
    .tp_dealloc = (destructor)rf_dealloc,
    .tp_traverse = (traverseproc)rf_traverse,
    .tp_clear = (inquiry)rf_clear,
    .tp_members = rf_members,
};

static PyObject *rf_make(PyTypeObject *tp, PyObject *result, long long rel, long long ts) {
    RecordFuture *f = (RecordFuture *)tp->tp_alloc(tp, 0);
    if (!f) return NULL;
    f->result = Py_NewRef(result);
    f->rel = rel;
    f->ts = ts;
    return (PyObject *)f;
}

typedef struct {
    PyObject_HEAD
    Out out;
    Py_ssize_t overhead;  /* added to the section's length in .size (the batch header) */
    int32_t count;
    int64_t base_ts, max_ts;
    PyObject *factory, *result;
    int factory_is_record_future;  /* decided once: then try_append allocates the future directly */
} RecordsBuilder;

static int rb_init(RecordsBuilder *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t overhead;
    PyObject *factory, *result;
    static char *kwlist[] = {"overhead", "factory", "result", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nOO", kwlist, &overhead, &factory, &result)) return -1;
    PyMem_Free(self->out.p);
    self->out.p = NULL; self->out.len = 0; self->out.cap = 0;
    self->overhead = overhead;
    self->count = 0;
    self->base_ts = -1;
    self->max_ts = -1;
    Py_XSETREF(self->factory, Py_NewRef(factory));
    self->factory_is_record_future =
        PyType_Check(factory) && PyType_IsSubtype((PyTypeObject *)factory, &RecordFutureType);
    Py_XSETREF(self->result, Py_NewRef(result));
    return 0;
}

static int rb_traverse(RecordsBuilder *self, visitproc visit, void *arg) {
    Py_VISIT(self->factory);
    Py_VISIT(self->result);
    return 0;
}

static int rb_clear(RecordsBuilder *self) {
    Py_CLEAR(self->factory);
    Py_CLEAR(self->result);
    return 0;
}

static void rb_dealloc(RecordsBuilder *self) {
    PyObject_GC_UnTrack(self);
    rb_clear(self);
    PyMem_Free(self->out.p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int rb_note_ts(RecordsBuilder *self, int64_t ts) {
    if (self->count == 0) self->base_ts = ts;
    if (ts > self->max_ts) self->max_ts = ts;
    return 0;
}

/* A timestamp in ms: an int, or a float truncated toward minus infinity (the producer computes
 * CreateTime as a float and leaves the truncation to this call). */
static long long ms_of(PyObject *o) {
    if (PyFloat_Check(o)) {
        double d = floor(PyFloat_AS_DOUBLE(o));
        if (!(d >= -9.2e18 && d <= 9.2e18)) {
            PyErr_SetString(PyExc_OverflowError, "timestamp out of range");
            return -1;
        }
        return (long long)d;
    }
    return PyLong_AsLongLong(o);
}

/* try_append(key, value, headers, timestamp, estimate, limit) -> future, or None (nothing added)
 * when the builder already holds a record and size + estimate > limit. */
static PyObject *rb_try_append(RecordsBuilder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "try_append(key, value, headers, timestamp, estimate, limit)");
        return NULL;
    }
    long long ts = ms_of(args[3]);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t estimate = PyLong_AsSsize_t(args[4]);
    if (estimate == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[5]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (self->count && self->overhead + self->out.len + estimate > limit) Py_RETURN_NONE;
    if (self->count == INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many records in one batch");
        return NULL;
    }
    int64_t base = self->count == 0 ? ts : self->base_ts;
    PyObject *headers = args[2];
    if (headers != Py_None && PyTuple_Check(headers) && PyTuple_GET_SIZE(headers) == 0) headers = NULL;
    if (append_record(&self->out, self->count, ts - base, args[0], args[1], headers) < 0) return NULL;
    rb_note_ts(self, ts);
    int32_t delta = self->count++;
    if (self->factory_is_record_future)
        return rf_make((PyTypeObject *)self->factory, self->result, delta, ts);
    PyObject *cargs[3];
    cargs[0] = self->result;
    cargs[1] = PyLong_FromLong(delta);
    if (!cargs[1]) return NULL;
    cargs[2] = PyLong_FromLongLong(ts);
    if (!cargs[2]) { Py_DECREF(cargs[1]); return NULL; }
    PyObject *fut = PyObject_Vectorcall(self->factory, cargs, 3, NULL);
    Py_DECREF(cargs[1]);
    Py_DECREF(cargs[2]);
    return fut;
}

/* append_section(section, count, timestamp) -> first offset delta: count records already encoded
 * (offset deltas from that first one, timestamp delta timestamp - base). */
static PyObject *rb_append_section(RecordsBuilder *self, PyObject *args) {
    Py_buffer section;
    long long count, ts;
    if (!PyArg_ParseTuple(args, "y*LL", &section, &count, &ts)) return NULL;
    if (count < 0 || count > (long long)INT32_MAX - self->count) {
        PyBuffer_Release(&section);
        PyErr_SetString(PyExc_OverflowError, "too many records in one batch");
        return NULL;
    }
    if (out_reserve(&self->out, section.len) < 0) { PyBuffer_Release(&section); return NULL; }
    memcpy(self->out.p + self->out.len, section.buf, (size_t)section.len);
    self->out.len += section.len;
    PyBuffer_Release(&section);
    rb_note_ts(self, ts);
    int32_t first = self->count;
    self->count += (int32_t)count;
    return PyLong_FromLong(first);
}

static PyObject *rb_getvalue(RecordsBuilder *self, PyObject *unused) {
    return PyBytes_FromStringAndSize(self->out.p ? self->out.p : "", self->out.len);
}

static PyObject *rb_get_size(RecordsBuilder *self, void *c) { return PyLong_FromSsize_t(self->overhead + self->out.len); }
static PyObject *rb_get_count(RecordsBuilder *self, void *c) { return PyLong_FromLong(self->count); }
static PyObject *rb_get_base_ts(RecordsBuilder *self, void *c) { return PyLong_FromLongLong(self->base_ts); }
static PyObject *rb_get_max_ts(RecordsBuilder *self, void *c) { return PyLong_FromLongLong(self->max_ts); }

static PyGetSetDef rb_getset[] = {
    {"size", (getter)rb_get_size, NULL, "overhead + the records section's length", NULL},
    {"count", (getter)rb_get_count, NULL, "records appended", NULL},
    {"base_ts", (getter)rb_get_base_ts, NULL, "the first record's timestamp (-1 before any)", NULL},
    {"max_ts", (getter)rb_get_max_ts, NULL, "the largest timestamp appended (-1 before any)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef rb_methods[] = {
    {"try_append", (PyCFunction)(void (*)(void))rb_try_append, METH_FASTCALL,
     "try_append(key, value, headers, timestamp, estimate, limit) -> future or None when full."},
    {"append_section", (PyCFunction)rb_append_section, METH_VARARGS,
     "append_section(section, count, timestamp) -> first offset delta."},
    {"getvalue", (PyCFunction)rb_getvalue, METH_NOARGS, "The records section as bytes."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordsBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proto._codec.RecordsBuilder",
    .tp_basicsize = sizeof(RecordsBuilder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RecordsBuilder(overhead, factory, result): an open batch's records, appended in place.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rb_init,
    .tp_dealloc = (destructor)rb_dealloc,
    .tp_traverse = (traverseproc)rb_traverse,
    .tp_clear = (inquiry)rb_clear,
    .tp_methods = rb_methods,
    .tp_getset = rb_getset,
};

static PyMethodDef methods[] = {
    {"encode_record", py_encode_record, METH_VARARGS, "One record (length prefix included), as encode_record_body."},
    {"encode_records", py_encode_records, METH_VARARGS, "The uncompressed records section of a list of values."},
    {"validate", py_validate, METH_VARARGS, "Validate the record batches of a buffer (see module docs)."},
    {"check_records", py_check_records, METH_VARARGS, "Validate an uncompressed records section."},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (Castagnoli) of a bytes-like object."},
    {"set_error_classes", py_set_error_classes, METH_VARARGS, "Install the typed error classes."},
    {"set_batch_info_class", py_set_batch_info_class, METH_O, "Install the BatchInfo NamedTuple class."},
    {"has_hardware_crc", py_has_hardware_crc, METH_NOARGS, "True when CRC-32C uses SSE 4.2."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proto._codec", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__codec(void) {
    crc_table_init();
#if HAVE_X86
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
    zeros_table(crc_long, LONG_BLOCK);
    zeros_table(crc_medium, MEDIUM_BLOCK);
    zeros_table(crc_short, SHORT_BLOCK);
#endif
    CorruptMessage = Py_NewRef(PyExc_ValueError);
    InvalidRecord = Py_NewRef(PyExc_ValueError);
    MessageTooLarge = Py_NewRef(PyExc_ValueError);
    InvalidTimestamp = Py_NewRef(PyExc_ValueError);
    UnsupportedCodec = Py_NewRef(PyExc_ValueError);
    if (PyType_Ready(&RecordsBuilderType) < 0 || PyType_Ready(&RecordFutureType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "RecordsBuilder", (PyObject *)&RecordsBuilderType) < 0 ||
        PyModule_AddObjectRef(m, "RecordFuture", (PyObject *)&RecordFutureType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
