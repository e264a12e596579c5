/* The stored records of a send-batch body, in C: the broker's per-message work for a
 * batch of small messages was ~6 us of Python per entry (entry parse, properties decoded
 * into a dict and encoded back, the record's header, its CRC, the dispatch facts), more
 * than a third of the master's CPU per message (docs/benchmarks.md).
 *
 * One function, ``encode_clean_batch``. It takes only batches whose every entry is
 * "clean" (ASCII properties without NUL, each pair one KEY\x01VALUE with both sides non-empty, no
 * repeated key, no key the broker adds, none of the keys that make Python refuse or
 * rewrite the batch) and returns None for anything else, which the caller then encodes
 * with the Python path in store/encoding.py: the same bytes and facts either way, held
 * against each other by tests/store/test_batch_records_c.py. No error is raised here for
 * a malformed body; the Python path raises the one users see.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ENTRY_OVERHEAD 22 /* totalsize magic crc flag bodylen (5 x int32) + proplen (int16) */
#define MAX_PAIRS 64
#define MAX_PROPERTIES_BYTES 32767

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

/* zlib.crc32(data): reflected CRC-32, slicing by eight. */
static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    const char *val;
    Py_ssize_t val_len;
} Pair;

typedef struct {
    const char *s;
    Py_ssize_t n;
} Bytes;

static int same(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn) {
    return an == bn && memcmp(a, b, (size_t)an) == 0;
}

static int in_list(const char *k, Py_ssize_t kn, const Bytes *list, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (same(k, kn, list[i].s, list[i].n)) return 1;
    return 0;
}

/* Split ``props`` into pairs; 0 if it is not clean (see the file's comment). */
static Py_ssize_t clean_pairs(const char *props, Py_ssize_t n, Pair *pairs) {
    Py_ssize_t count = 0;
    if (n == 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (props[i] == 0 || (unsigned char)props[i] >= 0x80) return -1; /* NUL: refused by Python */
    Py_ssize_t start = 0;
    while (start <= n) {
        const char *seg = props + start;
        const char *end = memchr(seg, 0x02, (size_t)(n - start));
        Py_ssize_t seg_len = end ? end - seg : n - start;
        const char *sep = memchr(seg, 0x01, (size_t)seg_len);
        if (sep == NULL || sep == seg || sep == seg + seg_len - 1) return -1;
        if (memchr(sep + 1, 0x01, (size_t)(seg + seg_len - sep - 1)) != NULL) return -1;
        if (count == MAX_PAIRS) return -1;
        pairs[count].key = seg;
        pairs[count].key_len = sep - seg;
        pairs[count].val = sep + 1;
        pairs[count].val_len = seg + seg_len - sep - 1;
        for (Py_ssize_t j = 0; j < count; j++)
            if (same(pairs[j].key, pairs[j].key_len, seg, sep - seg)) return -1; /* repeated */
        count++;
        if (end == NULL) break;
        start += seg_len + 1;
        if (start == n) return -1; /* a trailing separator: an empty segment */
    }
    return count;
}

static int32_t java_hash_ascii(const char *s, Py_ssize_t n) {
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) h = 31u * h + (unsigned char)s[i];
    return (int32_t)h;
}

static int bytes_list(PyObject *tuple, Bytes *out, Py_ssize_t cap, Py_ssize_t *count) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) > cap) {
        PyErr_SetString(PyExc_TypeError, "expected a short tuple of bytes");
        return -1;
    }
    *count = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t i = 0; i < *count; i++) {
        PyObject *b = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "expected bytes");
            return -1;
        }
        out[i].s = PyBytes_AS_STRING(b);
        out[i].n = PyBytes_GET_SIZE(b);
    }
    return 0;
}

typedef struct {
    const char *tags, *keys, *uniq, *wait, *delay;
    Py_ssize_t tags_n, keys_n, uniq_n, wait_n, delay_n;
} Named;

/* encode_clean_batch(body, head, topic_part, extra_text, extra_keys, refused_keys, names,
 *                    extra_facts, topic, queue_id, queue_key, store_host, sysflag,
 *                    request_cls, encoded_cls) -> (records, wait, body bytes) | None
 *
 * head: the record header with TOTALSIZE, BODYCRC, FLAG and BODYLEN zero (its last four
 * bytes are BODYLEN); topic_part: the topic's length byte and bytes; extra_text: the
 * properties the broker adds, encoded; extra_keys: their names; refused_keys: names whose
 * presence leaves the batch to Python; names: (TAGS, KEYS, UNIQ_KEY, WAIT, DELAY);
 * extra_facts: (tags code, keys, uniq key) the added properties give an entry that lacks
 * them.
 */
static PyObject *encode_clean_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "encode_clean_batch takes 15 arguments");
        return NULL;
    }
    Py_buffer body;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *records = NULL;
    PyObject *head = args[1], *topic_part = args[2], *extra_text = args[3];
    PyObject *extra_facts = args[7], *topic = args[8], *queue_id = args[9], *queue_key = args[10];
    PyObject *store_host = args[11], *sysflag = args[12], *request_cls = args[13], *encoded_cls = args[14];
    Bytes extra_keys[16], refused[16], names[5];
    Py_ssize_t n_extra, n_refused, n_names;
    if (!PyBytes_Check(head) || !PyBytes_Check(topic_part) || !PyBytes_Check(extra_text) ||
        !PyTuple_Check(extra_facts) || PyTuple_GET_SIZE(extra_facts) != 3 || PyBytes_GET_SIZE(head) < 4) {
        PyErr_SetString(PyExc_TypeError, "encode_clean_batch: bad arguments");
        goto done;
    }
    if (bytes_list(args[4], extra_keys, 16, &n_extra) < 0 || bytes_list(args[5], refused, 16, &n_refused) < 0 ||
        bytes_list(args[6], names, 5, &n_names) < 0)
        goto done;
    if (n_names != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_clean_batch: five names");
        goto done;
    }
    const unsigned char *buf = (const unsigned char *)body.buf;
    Py_ssize_t len = body.len;
    const char *head_s = PyBytes_AS_STRING(head);
    Py_ssize_t head_n = PyBytes_GET_SIZE(head);
    const char *topic_s = PyBytes_AS_STRING(topic_part);
    Py_ssize_t topic_n = PyBytes_GET_SIZE(topic_part);
    const char *extra_s = PyBytes_AS_STRING(extra_text);
    Py_ssize_t extra_n = PyBytes_GET_SIZE(extra_text);
    PyObject *extra_tags_code = PyTuple_GET_ITEM(extra_facts, 0);
    PyObject *extra_keys_val = PyTuple_GET_ITEM(extra_facts, 1);
    PyObject *extra_uniq = PyTuple_GET_ITEM(extra_facts, 2);
    int wait = 1;
    long long body_bytes = 0;
    Pair pairs[MAX_PAIRS];

    records = PyList_New(0);
    if (records == NULL) goto done;
    Py_ssize_t pos = 0;
    while (pos < len) {
        if (len - pos < ENTRY_OVERHEAD) goto fallback;
        int32_t total = be32(buf + pos);
        int32_t flag = be32(buf + pos + 12);
        int32_t body_len = be32(buf + pos + 16);
        if (total < ENTRY_OVERHEAD || pos + total > len || body_len < 0) goto fallback;
        Py_ssize_t p = pos + 20;
        if (p + body_len + 2 > pos + total) goto fallback;
        const unsigned char *entry_body = buf + p;
        body_bytes += body_len;
        p += body_len;
        int16_t props_len = (int16_t)((uint16_t)buf[p] << 8 | buf[p + 1]);
        p += 2;
        if (props_len < 0 || p + props_len != pos + total) goto fallback;
        const char *props = (const char *)buf + p;
        pos += total;

        Py_ssize_t n_pairs = clean_pairs(props, props_len, pairs);
        if (n_pairs < 0) goto fallback;
        Named found = {0};
        for (Py_ssize_t i = 0; i < n_pairs; i++) {
            const char *k = pairs[i].key;
            Py_ssize_t kn = pairs[i].key_len;
            if (in_list(k, kn, extra_keys, n_extra) || in_list(k, kn, refused, n_refused)) goto fallback;
            if (same(k, kn, names[0].s, names[0].n)) {
                found.tags = pairs[i].val;
                found.tags_n = pairs[i].val_len;
            } else if (same(k, kn, names[1].s, names[1].n)) {
                found.keys = pairs[i].val;
                found.keys_n = pairs[i].val_len;
            } else if (same(k, kn, names[2].s, names[2].n)) {
                found.uniq = pairs[i].val;
                found.uniq_n = pairs[i].val_len;
            } else if (same(k, kn, names[3].s, names[3].n)) {
                if (same(pairs[i].val, pairs[i].val_len, "false", 5)) wait = 0;
            } else if (same(k, kn, names[4].s, names[4].n)) {
                if (!same(pairs[i].val, pairs[i].val_len, "0", 1)) goto fallback; /* refused by Python */
            }
        }
        Py_ssize_t stored_props = props_len + (props_len && extra_n ? 1 : 0) + extra_n;
        if (stored_props > MAX_PROPERTIES_BYTES) goto fallback;
        Py_ssize_t size = head_n + body_len + topic_n + 2 + stored_props;
        if (size > INT32_MAX) goto fallback;

        PyObject *data = PyByteArray_FromStringAndSize(NULL, size);
        if (data == NULL) goto done;
        unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(data);
        memcpy(out, head_s, (size_t)head_n);
        put32(out, (uint32_t)size);
        put32(out + 8, crc32_of(entry_body, body_len) & 0x7FFFFFFFu);
        put32(out + 16, (uint32_t)flag);
        put32(out + head_n - 4, (uint32_t)body_len);
        unsigned char *w = out + head_n;
        memcpy(w, entry_body, (size_t)body_len);
        w += body_len;
        memcpy(w, topic_s, (size_t)topic_n);
        w += topic_n;
        w[0] = (unsigned char)(stored_props >> 8);
        w[1] = (unsigned char)stored_props;
        w += 2;
        const char *text = (const char *)w;
        memcpy(w, props, (size_t)props_len);
        w += props_len;
        if (props_len && extra_n) *w++ = 0x02;
        memcpy(w, extra_s, (size_t)extra_n);

        PyObject *tags_code, *keys, *uniq, *text_obj, *request = NULL, *encoded = NULL;
        if (found.tags) {
            tags_code = PyLong_FromLong(java_hash_ascii(found.tags, found.tags_n));
        } else {
            tags_code = Py_NewRef(extra_tags_code);
        }
        keys = found.keys ? PyUnicode_DecodeASCII(found.keys, found.keys_n, NULL) : Py_NewRef(extra_keys_val);
        uniq = found.uniq ? PyUnicode_DecodeASCII(found.uniq, found.uniq_n, NULL) : Py_NewRef(extra_uniq);
        text_obj = PyUnicode_DecodeASCII(text, stored_props, NULL);
        PyObject *size_obj = PyLong_FromSsize_t(size);
        PyObject *minus_one = PyLong_FromLong(-1);
        PyObject *zero = PyLong_FromLong(0);
        if (tags_code && keys && uniq && text_obj && size_obj && minus_one && zero) {
            PyObject *req_args[12] = {topic, queue_id, minus_one, size_obj, tags_code, zero,
                                      zero,  sysflag,  keys,      uniq,     zero,      text_obj};
            request = PyObject_Vectorcall(request_cls, req_args, 12, NULL);
            if (request != NULL) {
                PyObject *enc_args[5] = {data, queue_key, Py_True, store_host, request};
                encoded = PyObject_Vectorcall(encoded_cls, enc_args, 5, NULL);
            }
        }
        Py_XDECREF(tags_code);
        Py_XDECREF(keys);
        Py_XDECREF(uniq);
        Py_XDECREF(text_obj);
        Py_XDECREF(size_obj);
        Py_XDECREF(minus_one);
        Py_XDECREF(zero);
        Py_XDECREF(request);
        Py_DECREF(data);
        if (encoded == NULL) goto done;
        int appended = PyList_Append(records, encoded);
        Py_DECREF(encoded);
        if (appended < 0) goto done;
    }
    if (PyList_GET_SIZE(records) == 0) goto fallback; /* an empty batch: Python refuses it */
    result = Py_BuildValue("(OOL)", records, wait ? Py_True : Py_False, body_bytes);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(records);
    PyBuffer_Release(&body);
    return result;
}

static PyObject *crc32(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"encode_clean_batch", (PyCFunction)(void (*)(void))encode_clean_batch, METH_FASTCALL,
     "The stored records and dispatch facts of a clean send-batch body, or None."},
    {"crc32", crc32, METH_O, "zlib.crc32 of a bytes-like object (the records' BODYCRC before masking)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ledgermq._recordc",
                                    "Send-batch records in C (see store/encoding.py).", -1, methods};

PyMODINIT_FUNC PyInit__recordc(void) {
    crc_init();
    return PyModule_Create(&module);
}
