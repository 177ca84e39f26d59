/*
 * proto._columnar: decode fetched record batches straight into columns (the consumer and Spark side
 * of the record codec; proto/columnar.py is its pure-Python twin and the documentation of record).
 *
 * Theory of operation
 * -------------------
 * A Fetch response carries a partition's batches as one bytes field. Decoding it record by record
 * in Python (a Record object, then a ConsumerRecord, then Arrow columns built from Python lists)
 * costs microseconds per record. Here one pass over the bytes appends every record to growable
 * column buffers laid out exactly as Apache Arrow wants them, so pyarrow wraps them without a copy
 * (``pa.Array.from_buffers``):
 *
 *   decode(buf, min_offset, max_offset, include_headers, crc32c, decompress) -> 21-tuple
 *       (num_rows, offsets int64[], timestamps int64[] (ms), timestamp_types int32[],
 *        key validity|None, key offsets int32[n+1], key data, key null count,
 *        value validity|None, value offsets, value data, value null count,
 *        header list offsets int32[n+1]|None, header key offsets, header key data (UTF-8),
 *        header value validity|None, header value offsets, header value data, header value nulls,
 *        next_offset, error)
 *       Batches wholly below ``min_offset`` are skipped unread; the walk stops at the first batch
 *       at or above ``max_offset`` and at a partial trailing batch (a fetch may end mid-batch).
 *       Only records with min_offset <= offset < max_offset become rows; control batches are
 *       skipped. ``crc32c`` (or None) and ``decompress(codec, section)`` are Python callables:
 *       one call per batch, so there is one CRC-32C and one bounded decompression in the project.
 *       A batch that fails (magic, CRC, decompression, record framing) ends the walk: its rows are
 *       rolled back, ``error`` is (base_offset, next_offset, reason) and the rows of the batches
 *       before it are kept - the consumer hands those out and reports the bad batch after.
 *       ``next_offset`` is where the next read starts: past the last batch walked, clamped to
 *       [min_offset, max_offset].
 *   records(columns, start, stop, topic, partition, record_type, header_type) -> list
 *       Rows [start, stop) as ``record_type`` tuples (topic, partition, offset, timestamp, key,
 *       value, headers): the consumer's ConsumerRecord, allocated here without a Python call each;
 *       those without headers are untracked by the cyclic GC (only atomic fields).
 *
 * Buffers are native-endian (Arrow's layout on every platform CPython targets here). Varints are
 * zig-zag, at most 10 bytes, wrapped to 64 bits; offsets and timestamps wrap as int64 does. The
 * pure-Python twin follows the same rules, in the same order, with the same messages, and
 * tests/unit/test_columnar.py checks that both agree on generated and on mangled batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define ATTRIBUTES_OFFSET 21
#define MAGIC 2
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define CONTROL_MASK 0x20

static PyObject *KafkaError;       /* errors of this class raised by ``decompress`` become ``error`` */
static PyTypeObject *ColumnsType;  /* proto.columnar.RecordColumns, a NamedTuple */

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->data, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }

static PyObject *buf_bytes(const Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }

/* A binary column: Arrow's validity bitmap (LSB first), int32 offsets and the data. */
typedef struct {
    Buf validity, offsets, data;
    Py_ssize_t rows, nulls;
} BinCol;

static int bincol_init(BinCol *c) {
    memset(c, 0, sizeof *c);
    return put_i32(&c->offsets, 0);
}

static void bincol_free(BinCol *c) {
    PyMem_Free(c->validity.data);
    PyMem_Free(c->offsets.data);
    PyMem_Free(c->data.data);
}

/* Append one value (n = -1: null). */
static int bincol_add(BinCol *c, const unsigned char *p, int64_t n) {
    if ((c->rows & 7) == 0) {
        unsigned char zero = 0;
        if (buf_put(&c->validity, &zero, 1)) return -1;
    }
    if (n >= 0) {
        c->validity.data[c->rows >> 3] |= (char)(1u << (c->rows & 7));
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a column's data exceeds 2 GiB (Arrow's int32 offsets)");
            return -1;
        }
        if (buf_put(&c->data, p, (Py_ssize_t)n)) return -1;
    } else {
        c->nulls++;
    }
    c->rows++;
    return put_i32(&c->offsets, (int32_t)c->data.len);
}

typedef struct {
    Py_ssize_t validity, offsets, data, rows, nulls;
} BinMark;

static BinMark bincol_mark(const BinCol *c) {
    BinMark m = {c->validity.len, c->offsets.len, c->data.len, c->rows, c->nulls};
    return m;
}

/* Roll back to a mark: the bitmap keeps ceil(rows / 8) bytes with no bit set past ``rows``. */
static void bincol_reset(BinCol *c, BinMark m) {
    c->validity.len = m.validity;
    c->offsets.len = m.offsets;
    c->data.len = m.data;
    c->rows = m.rows;
    c->nulls = m.nulls;
    if (c->rows & 7) c->validity.data[c->rows >> 3] &= (char)((1u << (c->rows & 7)) - 1);
}

static PyObject *bincol_validity(const BinCol *c) {
    if (c->nulls == 0) Py_RETURN_NONE;
    return buf_bytes(&c->validity);
}

/* ------------------------------------------------------------------ parsing helpers */

static inline int64_t load_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t load_be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* Zig-zag varint within [*pp, end). 0 ok, 1 truncated, 2 longer than 10 bytes. */
static inline int read_varint(const unsigned char **pp, const unsigned char *end, int64_t *out) {
    const unsigned char *p = *pp;
    uint64_t z = 0;
    for (int shift = 0;; shift += 7) {
        if (shift > 63) return 2;
        if (p >= end) return 1;
        unsigned char b = *p++;
        z |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
    }
    *pp = p;
    *out = (int64_t)((z >> 1) ^ (~(z & 1) + 1));
    return 0;
}

static int is_ascii(const unsigned char *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (p[i] & 0x80) return 0;
    return 1;
}

/* ------------------------------------------------------------------ decode */

typedef struct {
    Buf offsets, timestamps, types, header_offsets, header_key_offsets, header_key_data;
    BinCol keys, values, header_values;
    Py_ssize_t rows, headers;
} Columns;

static void columns_free(Columns *c) {
    PyMem_Free(c->offsets.data);
    PyMem_Free(c->timestamps.data);
    PyMem_Free(c->types.data);
    PyMem_Free(c->header_offsets.data);
    PyMem_Free(c->header_key_offsets.data);
    PyMem_Free(c->header_key_data.data);
    bincol_free(&c->keys);
    bincol_free(&c->values);
    bincol_free(&c->header_values);
}

typedef struct {
    Py_ssize_t offsets, timestamps, types, header_offsets, header_key_offsets, header_key_data, rows, headers;
    BinMark keys, values, header_values;
} Mark;

static Mark columns_mark(const Columns *c) {
    Mark m = {c->offsets.len, c->timestamps.len, c->types.len, c->header_offsets.len, c->header_key_offsets.len,
              c->header_key_data.len, c->rows, c->headers,
              bincol_mark(&c->keys), bincol_mark(&c->values), bincol_mark(&c->header_values)};
    return m;
}

static void columns_reset(Columns *c, Mark m) {
    c->offsets.len = m.offsets;
    c->timestamps.len = m.timestamps;
    c->types.len = m.types;
    c->header_offsets.len = m.header_offsets;
    c->header_key_offsets.len = m.header_key_offsets;
    c->header_key_data.len = m.header_key_data;
    c->rows = m.rows;
    c->headers = m.headers;
    bincol_reset(&c->keys, m.keys);
    bincol_reset(&c->values, m.values);
    bincol_reset(&c->header_values, m.header_values);
}

/* A header key as UTF-8 (invalid bytes become U+FFFD, as bytes.decode("utf-8", "replace")). */
static int put_header_key(Columns *c, const unsigned char *p, int64_t n) {
    if (n > 0 && !is_ascii(p, n)) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "replace");
        if (s == NULL) return -1;
        Py_ssize_t size;
        const char *u = PyUnicode_AsUTF8AndSize(s, &size);
        int rc = u == NULL ? -1 : buf_put(&c->header_key_data, u, size);
        Py_DECREF(s);
        if (rc) return -1;
    } else if (n > 0 && buf_put(&c->header_key_data, p, (Py_ssize_t)n)) {
        return -1;
    }
    if (c->header_key_data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "header keys exceed 2 GiB (Arrow's int32 offsets)");
        return -1;
    }
    return put_i32(&c->header_key_offsets, (int32_t)c->header_key_data.len);
}

/* Walk one uncompressed records section. Returns 0, -1 on a Python error, 1 with *reason set (a
 * new reference) when the records are malformed. */
static int decode_records(Columns *c, const unsigned char *p, const unsigned char *end, int32_t count,
                          int64_t base_offset, int64_t base_ts, int64_t max_ts, int32_t ts_type,
                          int64_t min_offset, int64_t max_offset, int include_headers, Py_ssize_t pos,
                          PyObject **reason) {
    int log_append = ts_type == 1;
    for (int32_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, hcount;
        int rc;
#define VARINT(out, limit)                                                                         \
    if ((rc = read_varint(&p, (limit), &(out))) != 0) {                                            \
        *reason = PyUnicode_FromFormat(rc == 1 ? "batch at position %zd: record %d is truncated"   \
                                               : "batch at position %zd: record %d has a varint longer than 10 bytes", \
                                       pos, (int)i);                                               \
        return *reason == NULL ? -1 : 1;                                                           \
    }
#define BAD(what, value)                                                                           \
    do {                                                                                           \
        *reason = PyUnicode_FromFormat("batch at position %zd: record %d has " what " %lld", pos,  \
                                       (int)i, (long long)(value));                                \
        return *reason == NULL ? -1 : 1;                                                           \
    } while (0)
        VARINT(length, end);
        if (length < 0 || length > end - p) BAD("length", length);
        const unsigned char *rec_end = p + length;
        if (p >= rec_end) {
            *reason = PyUnicode_FromFormat("batch at position %zd: record %d is truncated", pos, (int)i);
            return *reason == NULL ? -1 : 1;
        }
        p++;  /* record attributes: unused in v2 */
        VARINT(ts_delta, rec_end);
        VARINT(off_delta, rec_end);
        int64_t offset = wrap_add(base_offset, off_delta);
        int keep = offset >= min_offset && offset < max_offset;
        VARINT(klen, rec_end);
        if (klen < -1 || klen > rec_end - p) BAD("key length", klen);
        const unsigned char *key = p;
        if (klen > 0) p += klen;
        VARINT(vlen, rec_end);
        if (vlen < -1 || vlen > rec_end - p) BAD("value length", vlen);
        const unsigned char *value = p;
        if (vlen > 0) p += vlen;
        VARINT(hcount, rec_end);
        if (hcount < 0 || hcount > rec_end - p) BAD("header count", hcount);
        if (keep) {
            if (put_i64(&c->offsets, offset) || put_i64(&c->timestamps, log_append ? max_ts : wrap_add(base_ts, ts_delta))
                || put_i32(&c->types, ts_type) || bincol_add(&c->keys, key, klen) || bincol_add(&c->values, value, vlen))
                return -1;
            c->rows++;
        }
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hk, hv;
            VARINT(hk, rec_end);
            if (hk < -1 || hk > rec_end - p) BAD("header key length", hk);
            const unsigned char *hkey = p;
            if (hk > 0) p += hk;
            VARINT(hv, rec_end);
            if (hv < -1 || hv > rec_end - p) BAD("header value length", hv);
            const unsigned char *hval = p;
            if (hv > 0) p += hv;
            if (keep && include_headers) {
                if (put_header_key(c, hkey, hk) || bincol_add(&c->header_values, hval, hv)) return -1;
                c->headers++;
            }
        }
        if (p != rec_end) BAD("bytes beyond its fields:", rec_end - p);
        if (keep && include_headers) {
            if (c->headers > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "more than 2**31 headers");
                return -1;
            }
            if (put_i32(&c->header_offsets, (int32_t)c->headers)) return -1;
        }
#undef VARINT
#undef BAD
    }
    return 0;
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long min_offset, max_offset;
    int include_headers;
    PyObject *crc_fn, *decompress_fn;
    if (!PyArg_ParseTuple(args, "y*LLpOO", &view, &min_offset, &max_offset, &include_headers, &crc_fn,
                          &decompress_fn))
        return NULL;
    Columns c;
    memset(&c, 0, sizeof c);
    PyObject *error = NULL, *result = NULL;
    if (bincol_init(&c.keys) || bincol_init(&c.values) || bincol_init(&c.header_values) ||
        put_i32(&c.header_key_offsets, 0) || (include_headers && put_i32(&c.header_offsets, 0)))
        goto done;
    const unsigned char *buf = view.buf;
    Py_ssize_t total = view.len, pos = 0;
    /* Sized for ~100-byte records up front: doubling from small buffers costs more than the copy. */
    Py_ssize_t guess = total / 100 + 64;
    if (buf_reserve(&c.values.data, total) || buf_reserve(&c.offsets, guess * 8) ||
        buf_reserve(&c.timestamps, guess * 8) || buf_reserve(&c.types, guess * 4) ||
        buf_reserve(&c.keys.offsets, guess * 4) || buf_reserve(&c.values.offsets, guess * 4) ||
        buf_reserve(&c.keys.validity, guess / 8 + 1) || buf_reserve(&c.values.validity, guess / 8 + 1) ||
        (include_headers && buf_reserve(&c.header_offsets, guess * 4)))
        goto done;
    int64_t next_offset = min_offset;
    while (total - pos >= HEADER_SIZE) {
        const unsigned char *h = buf + pos;
        int64_t base_offset = load_be64(h);
        int32_t length = load_be32(h + 8);
        if (length < HEADER_SIZE - LOG_OVERHEAD || length > total - pos - LOG_OVERHEAD) break;  /* partial tail */
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        int magic = (signed char)h[16];
        uint32_t crc = (uint32_t)load_be32(h + 17);
        int attributes = (int16_t)(((unsigned)h[21] << 8) | h[22]);
        int32_t last_delta = load_be32(h + 23);
        int64_t base_ts = load_be64(h + 27), max_ts = load_be64(h + 35);
        int32_t count = load_be32(h + 57);
        int64_t batch_next = wrap_add(wrap_add(base_offset, last_delta), 1);
        if (batch_next <= min_offset) {  /* wholly before what is wanted: not even checked */
            pos += size;
            continue;
        }
        if (base_offset >= max_offset) break;
        PyObject *reason = NULL;
        if (magic != MAGIC) {
            reason = PyUnicode_FromFormat("batch at position %zd has magic %d", pos, magic);
            if (reason == NULL) goto done;
        }
        if (reason == NULL && crc_fn != Py_None) {
            PyObject *mv = PyMemoryView_FromMemory((char *)h + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET, PyBUF_READ);
            if (mv == NULL) goto done;
            PyObject *got = PyObject_CallOneArg(crc_fn, mv);
            Py_DECREF(mv);
            if (got == NULL) goto done;
            unsigned long value = PyLong_AsUnsignedLongMask(got);
            Py_DECREF(got);
            if (value == (unsigned long)-1 && PyErr_Occurred()) goto done;
            if ((uint32_t)value != crc) {
                reason = PyUnicode_FromFormat("batch at position %zd failed its CRC-32C check", pos);
                if (reason == NULL) goto done;
            }
        }
        if (reason == NULL && !(attributes & CONTROL_MASK)) {
            Mark mark = columns_mark(&c);
            int codec = attributes & CODEC_MASK;
            PyObject *section = NULL;
            Py_buffer sview;
            const unsigned char *p = h + HEADER_SIZE, *end = h + size;
            if (codec != 0) {
                PyObject *mv = PyMemoryView_FromMemory((char *)p, size - HEADER_SIZE, PyBUF_READ);
                if (mv == NULL) goto done;
                section = PyObject_CallFunction(decompress_fn, "iO", codec, mv);
                Py_DECREF(mv);
                if (section == NULL) {
                    if (KafkaError == NULL || !PyErr_ExceptionMatches(KafkaError)) goto done;
                    PyObject *type, *value, *tb;
                    PyErr_Fetch(&type, &value, &tb);
                    PyErr_NormalizeException(&type, &value, &tb);
                    reason = PyObject_Str(value != NULL ? value : type);
                    Py_XDECREF(type);
                    Py_XDECREF(value);
                    Py_XDECREF(tb);
                    if (reason == NULL) goto done;
                } else {
                    if (PyObject_GetBuffer(section, &sview, PyBUF_SIMPLE)) {
                        Py_DECREF(section);
                        goto done;
                    }
                    p = sview.buf;
                    end = p + sview.len;
                }
            }
            if (reason == NULL) {
                int rc = decode_records(&c, p, end, count, base_offset, base_ts, max_ts,
                                        (attributes & TIMESTAMP_TYPE_MASK) ? 1 : 0, min_offset, max_offset,
                                        include_headers, pos, &reason);
                if (section != NULL) {
                    PyBuffer_Release(&sview);
                    Py_DECREF(section);
                }
                if (rc < 0) goto done;
                if (rc > 0) columns_reset(&c, mark);
            }
        }
        if (reason != NULL) {
            error = Py_BuildValue("(LLN)", (long long)base_offset, (long long)batch_next, reason);
            if (error == NULL) goto done;
            break;
        }
        if (batch_next > next_offset) next_offset = batch_next < max_offset ? batch_next : max_offset;
        pos += size;
    }
    PyObject *header_offsets;
    if (include_headers) {
        header_offsets = buf_bytes(&c.header_offsets);
    } else {
        header_offsets = Py_NewRef(Py_None);
    }
    if (header_offsets == NULL) goto done;
    PyObject *fields = Py_BuildValue(
        "(nNNNNNNnNNNnNNNNNNnLN)", c.rows, buf_bytes(&c.offsets), buf_bytes(&c.timestamps), buf_bytes(&c.types),
        bincol_validity(&c.keys), buf_bytes(&c.keys.offsets), buf_bytes(&c.keys.data), c.keys.nulls,
        bincol_validity(&c.values), buf_bytes(&c.values.offsets), buf_bytes(&c.values.data), c.values.nulls,
        header_offsets, buf_bytes(&c.header_key_offsets), buf_bytes(&c.header_key_data),
        bincol_validity(&c.header_values), buf_bytes(&c.header_values.offsets), buf_bytes(&c.header_values.data),
        c.header_values.nulls, (long long)next_offset, error ? error : Py_NewRef(Py_None));
    error = NULL;  /* stolen by "N" (also on failure) */
    if (fields == NULL || ColumnsType == NULL) {
        result = fields;
        goto done;
    }
    PyObject *call_args = PyTuple_Pack(1, fields);
    Py_DECREF(fields);
    if (call_args == NULL) goto done;
    result = PyTuple_Type.tp_new(ColumnsType, call_args, NULL);
    Py_DECREF(call_args);
done:
    Py_XDECREF(error);
    columns_free(&c);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ records */

static const char *column_bytes(PyObject *cols, Py_ssize_t i, Py_ssize_t min_len) {
    PyObject *b = PyTuple_GET_ITEM(cols, i);
    if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) < min_len) {
        PyErr_Format(PyExc_ValueError, "column field %zd is not bytes of at least %zd bytes", i, min_len);
        return NULL;
    }
    return PyBytes_AS_STRING(b);
}

/* Bitmap, offsets and data of a binary column, checked against the rows they must cover. */
typedef struct {
    const unsigned char *validity;
    const int32_t *offsets;
    const char *data;
    Py_ssize_t data_len;
} BinView;

static int bin_view(PyObject *cols, Py_ssize_t first, Py_ssize_t rows, BinView *v) {
    PyObject *validity = PyTuple_GET_ITEM(cols, first);
    if (validity == Py_None) {
        v->validity = NULL;
    } else {
        if (!(v->validity = (const unsigned char *)column_bytes(cols, first, (rows + 7) / 8))) return -1;
    }
    if (!(v->offsets = (const int32_t *)column_bytes(cols, first + 1, (rows + 1) * 4))) return -1;
    if (!(v->data = column_bytes(cols, first + 2, 0))) return -1;
    v->data_len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(cols, first + 2));
    return 0;
}

static PyObject *bin_value(const BinView *v, Py_ssize_t i) {
    if (v->validity != NULL && !(v->validity[i >> 3] & (1u << (i & 7)))) Py_RETURN_NONE;
    int32_t a = v->offsets[i], b = v->offsets[i + 1];
    if (a < 0 || b < a || b > v->data_len) {
        PyErr_SetString(PyExc_ValueError, "binary column offsets out of range");
        return NULL;
    }
    return PyBytes_FromStringAndSize(v->data + a, b - a);
}

static PyObject *py_records(PyObject *self, PyObject *args) {
    PyObject *cols, *topic, *partition, *record_type, *header_type;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "O!nnOOOO", &PyTuple_Type, &cols, &start, &stop, &topic, &partition, &record_type,
                          &header_type))
        return NULL;
    if (PyTuple_GET_SIZE(cols) != 21) {
        PyErr_SetString(PyExc_ValueError, "columns must be the 21 fields decode() returns");
        return NULL;
    }
    if (!PyType_Check(record_type) || !PyType_IsSubtype((PyTypeObject *)record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass (a NamedTuple)");
        return NULL;
    }
    Py_ssize_t rows = PyLong_AsSsize_t(PyTuple_GET_ITEM(cols, 0));
    if (rows == -1 && PyErr_Occurred()) return NULL;
    if (start < 0 || stop > rows || start > stop) {
        PyErr_Format(PyExc_IndexError, "rows [%zd, %zd) outside [0, %zd)", start, stop, rows);
        return NULL;
    }
    const int64_t *offsets = (const int64_t *)column_bytes(cols, 1, rows * 8);
    const int64_t *stamps = (const int64_t *)column_bytes(cols, 2, rows * 8);
    if (offsets == NULL || stamps == NULL) return NULL;
    BinView keys, values, hvalues;
    if (bin_view(cols, 4, rows, &keys) || bin_view(cols, 8, rows, &values)) return NULL;
    const int32_t *hoffsets = NULL, *hkoffsets = NULL;
    const char *hkdata = NULL;
    Py_ssize_t nheaders = 0, hkdata_len = 0;
    if (PyTuple_GET_ITEM(cols, 12) != Py_None) {
        if (!(hoffsets = (const int32_t *)column_bytes(cols, 12, (rows + 1) * 4))) return NULL;
        nheaders = hoffsets[rows];
        if (nheaders < 0 || !(hkoffsets = (const int32_t *)column_bytes(cols, 13, (nheaders + 1) * 4)) ||
            !(hkdata = column_bytes(cols, 14, 0)) || bin_view(cols, 15, nheaders, &hvalues)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad header offsets");
            return NULL;
        }
        hkdata_len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(cols, 14));
    }
    PyObject *out = PyList_New(stop - start);
    if (out == NULL) return NULL;
    PyObject *no_headers = PyTuple_New(0);
    if (no_headers == NULL) goto fail;
    PyTypeObject *rt = (PyTypeObject *)record_type;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *rec = rt->tp_alloc(rt, 7);
        if (rec == NULL) goto fail;
        PyList_SET_ITEM(out, i - start, rec);
        PyTuple_SET_ITEM(rec, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(rec, 1, Py_NewRef(partition));
        PyObject *o = PyLong_FromLongLong(offsets[i]);
        if (o == NULL) goto fail;
        PyTuple_SET_ITEM(rec, 2, o);
        if (!(o = PyLong_FromLongLong(stamps[i]))) goto fail;
        PyTuple_SET_ITEM(rec, 3, o);
        if (!(o = bin_value(&keys, i))) goto fail;
        PyTuple_SET_ITEM(rec, 4, o);
        if (!(o = bin_value(&values, i))) goto fail;
        PyTuple_SET_ITEM(rec, 5, o);
        int32_t h0 = hoffsets ? hoffsets[i] : 0, h1 = hoffsets ? hoffsets[i + 1] : 0;
        if (h1 <= h0) {
            if (h1 < h0) {
                PyErr_SetString(PyExc_ValueError, "header offsets go backwards");
                goto fail;
            }
            PyTuple_SET_ITEM(rec, 6, Py_NewRef(no_headers));
            /* Only atomic fields (str, int, bytes, None, ()): it cannot be part of a cycle. Untracked,
             * a poll of 100k records does not make every GC pass walk them all (CPython untracks
             * plain tuples like this itself, but not tuple subclasses). */
            PyObject_GC_UnTrack(rec);
            continue;
        }
        if (h0 < 0 || h1 > nheaders) {
            PyErr_SetString(PyExc_ValueError, "header offsets out of range");
            goto fail;
        }
        PyObject *hs = PyTuple_New(h1 - h0);
        if (hs == NULL) goto fail;
        PyTuple_SET_ITEM(rec, 6, hs);
        for (int32_t j = h0; j < h1; j++) {
            int32_t a = hkoffsets[j], b = hkoffsets[j + 1];
            if (a < 0 || b < a || b > hkdata_len) {
                PyErr_SetString(PyExc_ValueError, "header key offsets out of range");
                goto fail;
            }
            PyObject *k = PyUnicode_DecodeUTF8(hkdata + a, b - a, "replace");
            if (k == NULL) goto fail;
            PyObject *v = bin_value(&hvalues, j);
            if (v == NULL) {
                Py_DECREF(k);
                goto fail;
            }
            PyObject *header = PyObject_CallFunctionObjArgs(header_type, k, v, NULL);
            Py_DECREF(k);
            Py_DECREF(v);
            if (header == NULL) goto fail;
            PyTuple_SET_ITEM(hs, j - h0, header);
        }
    }
    Py_DECREF(no_headers);
    return out;
fail:
    Py_XDECREF(no_headers);
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ module */

static PyObject *py_set_classes(PyObject *self, PyObject *args) {
    PyObject *error_class, *columns_class;
    if (!PyArg_ParseTuple(args, "OO", &error_class, &columns_class)) return NULL;
    if (!PyType_Check(columns_class) || !PyType_IsSubtype((PyTypeObject *)columns_class, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the columns class must be a tuple subclass (a NamedTuple)");
        return NULL;
    }
    Py_XSETREF(KafkaError, Py_NewRef(error_class));
    Py_XSETREF(ColumnsType, (PyTypeObject *)Py_NewRef(columns_class));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", py_decode, METH_VARARGS, "Decode fetched batches into Arrow-layout columns (see module docs)."},
    {"records", py_records, METH_VARARGS, "Rows [start, stop) of decoded columns as record tuples."},
    {"set_classes", py_set_classes, METH_VARARGS, "Install the error class to catch and the columns NamedTuple."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proto._columnar", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__columnar(void) { return PyModule_Create(&module); }
