/* The stored records of sent messages, in C: the broker's per-message work before the
 * commit log (properties decoded into a dict and encoded back, the record's header, its
 * CRC, the dispatch facts) was ~6 us of Python per batch entry and a fifth of the master's
 * CPU per single send (docs/benchmarks.md).
 *
 * Two functions, ``encode_clean_batch`` (a send-batch body) and ``encode_clean_single``
 * (one SEND_MESSAGE / SEND_MESSAGE_V2 message). They take only "clean" messages (ASCII
 * properties without NUL, each pair one KEY\x01VALUE with both sides non-empty, no
 * repeated key, no key the broker adds, none of the keys that make Python refuse or
 * rewrite the message) and return None for anything else, which the caller then encodes
 * with the Python path in store/encoding.py: the same bytes and facts either way, held
 * against each other by tests/store/test_batch_records_c.py and
 * tests/store/test_single_records_c.py. No error is raised here for a malformed request;
 * the Python path raises the one users see.
 *
 * Further down, the same way round for what a replica reads back: ``scan_records``, the
 * leading run of stored records store/record_scan.py's loop would read, which it goes on
 * from (tests/store/test_record_scan_c.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_recordc.h"

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
uint32_t ledgermq_crc32(const unsigned char *p, Py_ssize_t n) {
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

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
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
    const char *tags, *keys, *uniq;
    Py_ssize_t tags_n, keys_n, uniq_n;
    int wait_at; /* the WAIT pair's index, -1 if none */
} Named;

/* What every record of one call shares: the broker's added properties, the names read or
 * refused, the record's fixed parts and the Python classes the facts become. */
typedef struct {
    const char *head_s, *topic_s, *extra_s;
    Py_ssize_t head_n, topic_n, extra_n;
    Bytes extra_keys[16], refused[16], names[5];
    Py_ssize_t n_extra, n_refused;
    PyObject *extra_tags_code, *extra_keys_val, *extra_uniq;
    PyObject *topic, *queue_id, *queue_key, *store_host, *sysflag, *request_cls, *encoded_cls;
    /* A single send's head is shared by every send from its host to its topic: these three
     * are written into each record (a batch's head has them already). */
    int per_record;
    int32_t queue_id_v, reconsume_v;
    int64_t born_v;
} Shared;

/* The shared context's Python-side part: (extra_text, extra_keys, refused_keys, names,
 * extra_facts, request_cls, encoded_cls), built once per set of added properties. */
static int read_context(PyObject *ctx, Shared *sh) {
    Py_ssize_t n_names;
    if (!PyTuple_Check(ctx) || PyTuple_GET_SIZE(ctx) != 7) {
        PyErr_SetString(PyExc_TypeError, "expected the 7-tuple context");
        return -1;
    }
    PyObject *extra_text = PyTuple_GET_ITEM(ctx, 0), *extra_facts = PyTuple_GET_ITEM(ctx, 4);
    if (!PyBytes_Check(extra_text) || !PyTuple_Check(extra_facts) || PyTuple_GET_SIZE(extra_facts) != 3) {
        PyErr_SetString(PyExc_TypeError, "context: bad added properties");
        return -1;
    }
    if (bytes_list(PyTuple_GET_ITEM(ctx, 1), sh->extra_keys, 16, &sh->n_extra) < 0 ||
        bytes_list(PyTuple_GET_ITEM(ctx, 2), sh->refused, 16, &sh->n_refused) < 0 ||
        bytes_list(PyTuple_GET_ITEM(ctx, 3), sh->names, 5, &n_names) < 0)
        return -1;
    if (n_names != 5) {
        PyErr_SetString(PyExc_TypeError, "context: five names");
        return -1;
    }
    sh->extra_s = PyBytes_AS_STRING(extra_text);
    sh->extra_n = PyBytes_GET_SIZE(extra_text);
    sh->extra_tags_code = PyTuple_GET_ITEM(extra_facts, 0);
    sh->extra_keys_val = PyTuple_GET_ITEM(extra_facts, 1);
    sh->extra_uniq = PyTuple_GET_ITEM(extra_facts, 2);
    sh->request_cls = PyTuple_GET_ITEM(ctx, 5);
    sh->encoded_cls = PyTuple_GET_ITEM(ctx, 6);
    return 0;
}

static int read_head(PyObject *head, PyObject *topic_part, Shared *sh) {
    if (!PyBytes_Check(head) || !PyBytes_Check(topic_part) || PyBytes_GET_SIZE(head) < 64) {
        PyErr_SetString(PyExc_TypeError, "expected the record head and topic part as bytes");
        return -1;
    }
    sh->head_s = PyBytes_AS_STRING(head);
    sh->head_n = PyBytes_GET_SIZE(head);
    sh->topic_s = PyBytes_AS_STRING(topic_part);
    sh->topic_n = PyBytes_GET_SIZE(topic_part);
    return 0;
}

/* Read the pairs' names: 0 if a name leaves the record to Python, else 1. */
static int read_names(const Shared *sh, const Pair *pairs, Py_ssize_t n_pairs, Named *found, int *wait) {
    const Bytes *names = sh->names;
    found->wait_at = -1;
    for (Py_ssize_t i = 0; i < n_pairs; i++) {
        const char *k = pairs[i].key;
        Py_ssize_t kn = pairs[i].key_len;
        if (in_list(k, kn, sh->extra_keys, sh->n_extra) || in_list(k, kn, sh->refused, sh->n_refused)) return 0;
        if (same(k, kn, names[0].s, names[0].n)) {
            found->tags = pairs[i].val;
            found->tags_n = pairs[i].val_len;
        } else if (same(k, kn, names[1].s, names[1].n)) {
            found->keys = pairs[i].val;
            found->keys_n = pairs[i].val_len;
        } else if (same(k, kn, names[2].s, names[2].n)) {
            found->uniq = pairs[i].val;
            found->uniq_n = pairs[i].val_len;
        } else if (same(k, kn, names[3].s, names[3].n)) {
            found->wait_at = (int)i;
            if (same(pairs[i].val, pairs[i].val_len, "false", 5)) *wait = 0;
        } else if (same(k, kn, names[4].s, names[4].n)) {
            if (!same(pairs[i].val, pairs[i].val_len, "0", 1)) return 0; /* refused or rewritten by Python */
        }
    }
    return 1;
}

/* One stored record and its facts (an EncodedMessage holding a DispatchRequest) from a
 * clean body and properties. ``drop_wait``: the WAIT pair is left out of the stored text
 * (a single send's, which the broker honours and strips; a batch entry's is stored).
 * Returns 1 with *out set, 0 where Python must build the record, -1 on an error. */
static int build_record(const Shared *sh, const unsigned char *body, Py_ssize_t body_len, int32_t flag,
                        const char *props, Py_ssize_t props_len, int drop_wait, int *wait, PyObject **out) {
    Pair pairs[MAX_PAIRS];
    Named found = {0};
    Py_ssize_t n_pairs = clean_pairs(props, props_len, pairs);
    if (n_pairs < 0) return 0;
    if (!read_names(sh, pairs, n_pairs, &found, wait)) return 0;
    int dropped = drop_wait && found.wait_at >= 0;
    Py_ssize_t kept_len = props_len;
    if (dropped) {
        const Pair *w = &pairs[found.wait_at];
        kept_len -= w->key_len + 1 + w->val_len + (n_pairs > 1 ? 1 : 0);
    }
    Py_ssize_t stored_props = kept_len + (kept_len && sh->extra_n ? 1 : 0) + sh->extra_n;
    if (stored_props > MAX_PROPERTIES_BYTES) return 0;
    Py_ssize_t size = sh->head_n + body_len + sh->topic_n + 2 + stored_props;
    if (size > INT32_MAX) return 0;

    PyObject *data = PyByteArray_FromStringAndSize(NULL, size);
    if (data == NULL) return -1;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(data);
    memcpy(o, sh->head_s, (size_t)sh->head_n);
    put32(o, (uint32_t)size);
    put32(o + 8, ledgermq_crc32(body, body_len) & 0x7FFFFFFFu);
    put32(o + 16, (uint32_t)flag);
    put32(o + sh->head_n - 4, (uint32_t)body_len);
    if (sh->per_record) {
        put32(o + 12, (uint32_t)sh->queue_id_v);
        put64(o + 40, (uint64_t)sh->born_v);
        put32(o + sh->head_n - 16, (uint32_t)sh->reconsume_v);
    }
    unsigned char *w = o + sh->head_n;
    memcpy(w, body, (size_t)body_len);
    w += body_len;
    memcpy(w, sh->topic_s, (size_t)sh->topic_n);
    w += sh->topic_n;
    w[0] = (unsigned char)(stored_props >> 8);
    w[1] = (unsigned char)stored_props;
    w += 2;
    const char *text = (const char *)w;
    if (!dropped) {
        memcpy(w, props, (size_t)props_len);
        w += props_len;
    } else {
        int first = 1;
        for (Py_ssize_t i = 0; i < n_pairs; i++) {
            if (i == found.wait_at) continue;
            if (!first) *w++ = 0x02;
            first = 0;
            memcpy(w, pairs[i].key, (size_t)pairs[i].key_len);
            w += pairs[i].key_len;
            *w++ = 0x01;
            memcpy(w, pairs[i].val, (size_t)pairs[i].val_len);
            w += pairs[i].val_len;
        }
    }
    if (kept_len && sh->extra_n) *w++ = 0x02;
    memcpy(w, sh->extra_s, (size_t)sh->extra_n);

    PyObject *tags_code, *keys, *uniq, *text_obj, *request = NULL, *encoded = NULL;
    if (found.tags) {
        tags_code = PyLong_FromLong(java_hash_ascii(found.tags, found.tags_n));
    } else {
        tags_code = Py_NewRef(sh->extra_tags_code);
    }
    keys = found.keys ? PyUnicode_DecodeASCII(found.keys, found.keys_n, NULL) : Py_NewRef(sh->extra_keys_val);
    uniq = found.uniq ? PyUnicode_DecodeASCII(found.uniq, found.uniq_n, NULL) : Py_NewRef(sh->extra_uniq);
    text_obj = PyUnicode_DecodeASCII(text, stored_props, NULL);
    PyObject *size_obj = PyLong_FromSsize_t(size);
    PyObject *minus_one = PyLong_FromLong(-1);
    PyObject *zero = PyLong_FromLong(0);
    if (tags_code && keys && uniq && text_obj && size_obj && minus_one && zero) {
        PyObject *req_args[12] = {sh->topic, sh->queue_id, minus_one, size_obj, tags_code, zero,
                                  zero,      sh->sysflag,   keys,      uniq,     zero,      text_obj};
        request = PyObject_Vectorcall(sh->request_cls, req_args, 12, NULL);
        if (request != NULL) {
            PyObject *enc_args[5] = {data, sh->queue_key, Py_True, sh->store_host, request};
            encoded = PyObject_Vectorcall(sh->encoded_cls, enc_args, 5, NULL);
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
    if (encoded == NULL) return -1;
    *out = encoded;
    return 1;
}

/* encode_clean_batch(body, head, topic_part, context, topic, queue_id, queue_key,
 *                    store_host, sysflag) -> (records, wait, body bytes) | None
 *
 * head: the record header with TOTALSIZE, BODYCRC, FLAG and BODYLEN zero (its last four
 * bytes are BODYLEN); topic_part: the topic's length byte and bytes; context: see
 * read_context (extra_text: the properties the broker adds, encoded; extra_keys: their
 * names; refused_keys: names whose presence leaves the batch to Python; names: (TAGS,
 * KEYS, UNIQ_KEY, WAIT, DELAY); extra_facts: (tags code, keys, uniq key) the added
 * properties give an entry that lacks them).
 */
static PyObject *encode_clean_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "encode_clean_batch takes 9 arguments");
        return NULL;
    }
    Shared sh;
    if (read_head(args[1], args[2], &sh) < 0 || read_context(args[3], &sh) < 0) return NULL;
    sh.per_record = 0;
    sh.topic = args[4];
    sh.queue_id = args[5];
    sh.queue_key = args[6];
    sh.store_host = args[7];
    sh.sysflag = args[8];
    Py_buffer body;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *records = NULL;
    const unsigned char *buf = (const unsigned char *)body.buf;
    Py_ssize_t len = body.len;
    int wait = 1;
    long long body_bytes = 0;

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

        PyObject *encoded = NULL;
        int built = build_record(&sh, entry_body, body_len, flag, props, props_len, 0, &wait, &encoded);
        if (built < 0) goto done;
        if (built == 0) goto fallback;
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

/* 1 with *out set if ``obj`` is an int in [lo, hi], 0 if it is not in range, -1 on an error. */
static int in_range(PyObject *obj, long long lo, long long hi, long long *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* encode_clean_single(body, properties, flag, queue_id, born_timestamp, reconsume_times,
 *                     head, topic_part, context, topic, queue_key, store_host, sysflag)
 *     -> (encoded, wait) | None
 *
 * One sent message's record, for a clean ``properties`` text (a str, ASCII): WAIT is
 * read and left out of the stored text, the added properties appended. ``head`` is the
 * record header with QUEUEID, BORNTIMESTAMP and RECONSUMETIMES zero as well (shared by
 * every send from one host to one topic); they are written from the arguments here.
 */
static PyObject *encode_clean_single(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "encode_clean_single takes 13 arguments");
        return NULL;
    }
    PyObject *props_obj = args[1];
    if (!PyUnicode_Check(props_obj)) {
        PyErr_SetString(PyExc_TypeError, "properties must be a str");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(props_obj)) Py_RETURN_NONE;
    Shared sh;
    if (read_head(args[6], args[7], &sh) < 0 || read_context(args[8], &sh) < 0) return NULL;
    long long flag, queue_id, born, reconsume;
    int fits = in_range(args[2], INT32_MIN, INT32_MAX, &flag);
    if (fits > 0) fits = in_range(args[3], INT32_MIN, INT32_MAX, &queue_id);
    if (fits > 0) fits = in_range(args[4], INT64_MIN, INT64_MAX, &born);
    if (fits > 0) fits = in_range(args[5], INT32_MIN, INT32_MAX, &reconsume);
    if (fits < 0) return NULL;
    if (fits == 0) Py_RETURN_NONE; /* Python's path raises the error users see */
    sh.per_record = 1;
    sh.queue_id_v = (int32_t)queue_id;
    sh.born_v = (int64_t)born;
    sh.reconsume_v = (int32_t)reconsume;
    sh.topic = args[9];
    sh.queue_id = args[3];
    sh.queue_key = args[10];
    sh.store_host = args[11];
    sh.sysflag = args[12];
    Py_buffer body;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0) return NULL;
    int wait = 1;
    PyObject *encoded = NULL, *result = NULL;
    int built = build_record(&sh, (const unsigned char *)body.buf, body.len, (int32_t)flag,
                             (const char *)PyUnicode_1BYTE_DATA(props_obj), PyUnicode_GET_LENGTH(props_obj), 1,
                             &wait, &encoded);
    PyBuffer_Release(&body);
    if (built < 0) return NULL;
    if (built == 0) Py_RETURN_NONE;
    result = PyTuple_Pack(2, encoded, wait ? Py_True : Py_False);
    Py_DECREF(encoded);
    return result;
}

/* An instance of ``type`` (a slotted class, no __init__ run) with each slot set through its
 * member descriptor ``setters[i]`` to ``values[i]`` (new references are taken), as the
 * Python decoders build frozen headers and commands; NULL with an error set if one fails. */
static PyObject *new_with_slots(PyTypeObject *type, PyObject *const *setters, PyObject *const *values,
                                Py_ssize_t n) {
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        descrsetfunc set = Py_TYPE(setters[i])->tp_descr_set;
        if (set == NULL || set(setters[i], obj, values[i]) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a field without a slot");
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* decode_header(cls, plan, slow, ext) -> header
 *
 * A typed request header (protocol/header_codec.py) from its extFields dict, for what
 * clients send: every number plain ASCII digits short enough for its Java type, every
 * boolean one of the four spellings, every required field there. Anything else (and an
 * ext that is not a dict) is decoded by ``slow``, the generated Python decoder, which
 * raises the errors users see. ``plan``: one (key, kind, default, setter, short) per
 * field in the class's order; kind 0 text, 1 int, 2 bool; default REQUIRED marks a
 * required field (``required`` below); setter: the slot's member descriptor; short:
 * an int field's longest length read here (fewer digits than its type's largest value).
 */
static PyObject *decode_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_header takes 5 arguments");
        return NULL;
    }
    PyObject *cls = args[0], *plan = args[1], *slow = args[2], *required = args[3], *ext = args[4];
    if (!PyType_Check(cls) || !PyTuple_Check(plan)) {
        PyErr_SetString(PyExc_TypeError, "decode_header: a class and a plan");
        return NULL;
    }
    if (!PyDict_CheckExact(ext)) return PyObject_CallOneArg(slow, ext);
    Py_ssize_t n = PyTuple_GET_SIZE(plan);
    PyObject *values[64] = {NULL}, *setters[64] = {NULL};
    if (n > 64) return PyObject_CallOneArg(slow, ext);
    Py_ssize_t made = 0;
    PyObject *result = NULL;
    for (; made < n; made++) {
        PyObject *field = PyTuple_GET_ITEM(plan, made);
        PyObject *key = PyTuple_GET_ITEM(field, 0);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
        PyObject *dflt = PyTuple_GET_ITEM(field, 2);
        PyObject *v = PyDict_GetItemWithError(ext, key); /* borrowed */
        PyObject *value = NULL;
        if (v == NULL && PyErr_Occurred()) goto error;
        if (v == NULL || v == Py_None) { /* None reads as absent, as ``ext.get`` gives it */
            if (dflt == required) goto slow_path;
            value = Py_NewRef(dflt);
        } else if (kind == 0) {
            value = Py_NewRef(v);
        } else {
            if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v)) goto slow_path;
            const char *t = (const char *)PyUnicode_1BYTE_DATA(v);
            Py_ssize_t len = PyUnicode_GET_LENGTH(v);
            if (kind == 1) {
                long short_len = PyLong_AsLong(PyTuple_GET_ITEM(field, 4));
                if (len == 0 || len >= short_len) goto slow_path;
                long long number = 0;
                for (Py_ssize_t i = 0; i < len; i++) {
                    if (t[i] < '0' || t[i] > '9') goto slow_path;
                    number = number * 10 + (t[i] - '0');
                }
                value = PyLong_FromLongLong(number);
                if (value == NULL) goto error;
            } else {
                if (same(t, len, "true", 4) || same(t, len, "1", 1)) {
                    value = Py_NewRef(Py_True);
                } else if (same(t, len, "false", 5) || same(t, len, "0", 1)) {
                    value = Py_NewRef(Py_False);
                } else {
                    goto slow_path;
                }
            }
        }
        values[made] = value;
        setters[made] = PyTuple_GET_ITEM(field, 3);
    }
    result = new_with_slots((PyTypeObject *)cls, setters, values, n);
    goto done;
slow_path:
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(values[i]);
    return PyObject_CallOneArg(slow, ext);
error:
done:
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(values[i]);
    return result;
}

/* decode_frame(loads, cls, setters, json_type, slow, payload) -> RemotingCommand
 *
 * A remoting frame (without its length prefix) whose header is JSON, as Java and our own
 * clients send it: ``loads`` (orjson's) parses the header in place, and the command is
 * built from it when every field has its usual type (int code, opaque, flag and version;
 * a str language and remark; extFields of str values). Anything else, a binary (ROCKETMQ)
 * header included, is decoded by ``slow``, the Python decoder, which raises the errors
 * users see. ``setters``: the member descriptors of code, opaque, flag, language, version,
 * remark, ext_fields, body and serialize_type, in that order.
 */
static PyObject *decode_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "decode_frame takes 6 arguments");
        return NULL;
    }
    PyObject *loads = args[0], *cls = args[1], *setters = args[2], *json_type = args[3], *slow = args[4];
    PyObject *payload = args[5];
    if (!PyType_Check(cls) || !PyTuple_Check(setters) || PyTuple_GET_SIZE(setters) != 9) {
        PyErr_SetString(PyExc_TypeError, "decode_frame: a class and nine setters");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *doc = NULL, *ext = NULL, *values[9] = {NULL};
    PyObject *result = NULL;
    if (view.len < 4) goto slow_path;
    uint32_t word = (uint32_t)be32(buf);
    Py_ssize_t header_len = (Py_ssize_t)(word & 0xFFFFFF);
    if ((word >> 24) != 0 || header_len > view.len - 4) goto slow_path; /* not JSON, or too short */
    PyObject *header = PyMemoryView_FromMemory((char *)buf + 4, header_len, PyBUF_READ);
    if (header == NULL) goto error;
    doc = PyObject_CallOneArg(loads, header);
    Py_DECREF(header);
    if (doc == NULL) {
        PyErr_Clear(); /* the Python decoder says why */
        goto slow_path;
    }
    if (!PyDict_CheckExact(doc)) goto slow_path;
    static const char *ints[4] = {"code", "opaque", "flag", "version"};
    static const int int_slots[4] = {0, 1, 2, 4};
    for (int i = 0; i < 4; i++) {
        PyObject *v = PyDict_GetItemString(doc, ints[i]);
        if (v == NULL) {
            values[int_slots[i]] = PyLong_FromLong(0);
            if (values[int_slots[i]] == NULL) goto error;
        } else if (PyLong_CheckExact(v)) {
            values[int_slots[i]] = Py_NewRef(v);
        } else {
            goto slow_path;
        }
    }
    PyObject *language = PyDict_GetItemString(doc, "language");
    if (language == NULL) {
        values[3] = PyUnicode_FromString("OTHER");
        if (values[3] == NULL) goto error;
    } else if (PyUnicode_CheckExact(language)) {
        values[3] = Py_NewRef(language);
    } else {
        goto slow_path;
    }
    PyObject *remark = PyDict_GetItemString(doc, "remark");
    if (remark == NULL || remark == Py_None) {
        values[5] = Py_NewRef(Py_None);
    } else if (PyUnicode_CheckExact(remark)) {
        values[5] = Py_NewRef(remark);
    } else {
        goto slow_path;
    }
    ext = PyDict_GetItemString(doc, "extFields");
    if (ext != NULL && PyDict_CheckExact(ext) && PyDict_GET_SIZE(ext) > 0) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(ext, &pos, &k, &v))
            if (!PyUnicode_CheckExact(v)) goto slow_path; /* numbers (C++): the Python path converts */
        values[6] = Py_NewRef(ext);
    } else if (ext == NULL || ext == Py_None || (PyDict_CheckExact(ext) && PyDict_GET_SIZE(ext) == 0)) {
        values[6] = PyDict_New();
        if (values[6] == NULL) goto error;
    } else {
        goto slow_path; /* another type: the Python path refuses it or reads it as empty */
    }
    values[7] = PyBytes_FromStringAndSize((const char *)buf + 4 + header_len, view.len - 4 - header_len);
    if (values[7] == NULL) goto error;
    values[8] = Py_NewRef(json_type);
    result = new_with_slots((PyTypeObject *)cls, PySequence_Fast_ITEMS(setters), values, 9);
    goto done;
slow_path:
    result = PyObject_CallOneArg(slow, payload);
    goto done;
error:
done:
    for (int i = 0; i < 9; i++) Py_XDECREF(values[i]);
    Py_XDECREF(doc);
    PyBuffer_Release(&view);
    return result;
}

/* Java's String.hashCode of a str (``java_hash`` below). */
static int32_t java_hash_of(PyObject *text) {
    uint32_t h = 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_IS_ASCII(text)) {
        const unsigned char *p = PyUnicode_1BYTE_DATA(text);
        for (Py_ssize_t i = 0; i < n; i++) h = 31u * h + p[i];
    } else {
        int kind = PyUnicode_KIND(text);
        const void *data = PyUnicode_DATA(text);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 cp = PyUnicode_READ(kind, data, i);
            if (cp < 0x10000) {
                h = 31u * h + cp;
            } else {
                cp -= 0x10000;
                h = 31u * h + (0xD800 + (cp >> 10));
                h = 31u * h + (0xDC00 + (cp & 0x3FF));
            }
        }
    }
    return (int32_t)h;
}

/* java_hash(text) -> int: Java's String.hashCode of a str, over its UTF-16 units (a
 * character past the BMP counts as its two surrogates; a lone surrogate as itself), as a
 * signed 32-bit int. RocketMQ writes it to disk as tag codes and index-key hashes. */
static PyObject *java_hash(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "java_hash takes a str");
        return NULL;
    }
    return PyLong_FromLong((long)java_hash_of(text));
}

/* java_ascii_hash(data) -> int | None: ``java_hash`` of ASCII bytes (an index key read
 * from a stored record), None if any byte is not ASCII (the caller decodes it first). */
static PyObject *java_ascii_hash(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < view.len; i++) {
        if (p[i] >= 0x80) {
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        h = 31u * h + p[i];
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyObject *crc32(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = ledgermq_crc32((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* scan_records(buf, pos, limit, base_offset, capacity, max_records, delay_levels_ms,
 *              special_topics, special) -> (rows, pos)
 *
 * store/record_scan.py's ``scan_records`` loop in C: the rows of the sound records from
 * ``pos`` and the position after the last one, each row the same 12-tuple of the same
 * values and types the Python loop builds. It stops at the first record it does not read
 * (one the Python loop refuses, but also one that runs past the end of ``buf``, or
 * arguments that are not ints of 64 bits or a buffer it cannot read); the caller's Python
 * loop goes on from there, so whatever it decides about that record (a stop, an error) is
 * decided in one place. ``buf``: bytes or an mmap, read through the buffer protocol.
 * TAGS, KEYS and UNIQ_KEY are read as ``prop_value`` reads them (the last pair starting
 * with the key whose value is not empty); a record of a topic in ``special_topics`` (a
 * frozenset of str) takes its tag code from ``special(topic, props, tags_code, store_ts,
 * delay_levels_ms)``, the Python helper.
 */
#define SCAN_HEAD 88                        /* the fixed fields up to BODYLENGTH, both hosts IPv4 */
#define SCAN_MIN_TOTAL 92                   /* message.record_length(0, 1, 0) */
#define SCAN_MAGIC ((int32_t)0xDAA320A7u)   /* message.MESSAGE_MAGIC_CODE */
#define SCAN_BORNHOST_V6 0x10               /* sysflag.BORNHOST_V6: 12 bytes more of host */
#define SCAN_STOREHOST_V6 0x20              /* sysflag.STOREHOST_V6 */

typedef struct {
    const unsigned char *s; /* NULL: no such pair with a value */
    Py_ssize_t n;
} Value;

/* The values of TAGS, UNIQ_KEY and KEYS in raw properties, as ``prop_value`` finds them:
 * the key (with its \x01) at the start of a pair, the last such pair with a non-empty value
 * (the value runs to the pair's end: no key holds a \x02). */
static void prop_values(const unsigned char *props, Py_ssize_t n, Value *tags, Value *uniq, Value *keys) {
    tags->s = uniq->s = keys->s = NULL;
    Py_ssize_t start = 0;
    while (start < n) {
        const unsigned char *seg = props + start;
        const unsigned char *sep = memchr(seg, 0x02, (size_t)(n - start));
        Py_ssize_t len = sep ? sep - seg : n - start;
        if (len > 5 && memcmp(seg, "TAGS\x01", 5) == 0) {
            tags->s = seg + 5;
            tags->n = len - 5;
        } else if (len > 5 && memcmp(seg, "KEYS\x01", 5) == 0) {
            keys->s = seg + 5;
            keys->n = len - 5;
        } else if (len > 9 && memcmp(seg, "UNIQ_KEY\x01", 9) == 0) {
            uniq->s = seg + 9;
            uniq->n = len - 9;
        }
        if (sep == NULL) break;
        start += len + 1;
    }
}

/* An int argument as 64 bits: 0 if it is not an int or does not fit (the Python loop reads it). */
static int arg_i64(PyObject *v, long long *out) {
    int overflow = 0;
    if (!PyLong_Check(v)) return 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A TAGS value's tag code: Java's hash of its text decoded as UTF-8 with replacement. */
static int tag_code(const Value *tags, int32_t *out) {
    const unsigned char *s = tags->s;
    for (Py_ssize_t i = 0; i < tags->n; i++) {
        if (s[i] >= 0x80) {
            PyObject *text = PyUnicode_DecodeUTF8((const char *)s, tags->n, "replace");
            if (text == NULL) return -1;
            *out = java_hash_of(text);
            Py_DECREF(text);
            return 0;
        }
    }
    *out = java_hash_ascii((const char *)s, tags->n);
    return 0;
}

static PyObject *bytes_or_none(const Value *v) {
    return v->s ? PyBytes_FromStringAndSize((const char *)v->s, v->n) : Py_NewRef(Py_None);
}

static PyObject *scan_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "scan_records takes 9 arguments");
        return NULL;
    }
    PyObject *pos_obj = args[1], *levels = args[6], *specials = args[7], *special = args[8];
    if (!PyAnySet_Check(specials)) {
        PyErr_SetString(PyExc_TypeError, "scan_records: special_topics must be a frozenset");
        return NULL;
    }
    PyObject *rows = PyList_New(0);
    if (rows == NULL) return NULL;
    long long pos, limit, base, capacity, max_records;
    if (!arg_i64(pos_obj, &pos) || !arg_i64(args[2], &limit) || !arg_i64(args[3], &base) ||
        !arg_i64(args[4], &capacity) || !arg_i64(args[5], &max_records))
        goto hand_back;
    long long room_end = limit < capacity ? limit : capacity;
    if (pos < 0 || room_end < LLONG_MIN + pos) goto hand_back;
    long long room = room_end - pos;
    if (room < SCAN_HEAD || max_records <= 0) goto hand_back;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* the Python loop reads it, or says why not */
        goto hand_back;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    long long len = (long long)view.len;
    const unsigned char *topic_raw = NULL; /* the last topic's bytes and str, reused while it repeats */
    unsigned int topic_len = 0;
    PyObject *topic = NULL;
    int topic_special = 0;
    long long count = 0, start = pos;
    while (count < max_records && room >= SCAN_HEAD) {
        if (pos > len - SCAN_HEAD) break;
        const unsigned char *r = b + pos;
        int32_t total = be32(r);
        if (be32(r + 4) != SCAN_MAGIC || total > room || total < SCAN_MIN_TOTAL) break;
        if (base > 0 ? pos > LLONG_MAX - base : pos < LLONG_MIN - base) break; /* no int64 phys is that */
        if (be64(r + 28) != base + pos) break;
        long long end = pos + total;
        if (end > len) break; /* past the buffer: the Python loop decides */
        int32_t sysflag = be32(r + 36);
        int born_v6 = (sysflag & SCAN_BORNHOST_V6) != 0;
        long long head = SCAN_HEAD + (born_v6 ? 12 : 0) + ((sysflag & SCAN_STOREHOST_V6) ? 12 : 0);
        if (head > total) break;
        int32_t body_len = be32(r + head - 4);
        if (body_len < 0) break;
        long long p = pos + head + body_len;
        if (p + 3 > end) break;
        unsigned int t_len = b[p];
        long long q = p + 1 + t_len;
        if (t_len == 0 || q + 2 > end) break;
        if ((long long)(int16_t)(uint16_t)(b[q] << 8 | b[q + 1]) != end - q - 2) break;

        const unsigned char *t_raw = b + p + 1;
        if (topic == NULL || t_len != topic_len || memcmp(t_raw, topic_raw, t_len) != 0) {
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)t_raw, t_len, "replace");
            if (decoded == NULL) goto error;
            Py_XSETREF(topic, decoded);
            topic_raw = t_raw;
            topic_len = t_len;
            topic_special = PySet_Contains(specials, topic);
            if (topic_special < 0) goto error;
        }
        const unsigned char *props = b + q + 2;
        Py_ssize_t props_len = (Py_ssize_t)(end - q - 2);
        Value tags, uniq, keys;
        prop_values(props, props_len, &tags, &uniq, &keys);
        int32_t code = 0;
        if (tags.s != NULL && tag_code(&tags, &code) < 0) goto error;

        PyObject *items[12];
        items[0] = PyLong_FromLong(total);
        items[1] = PyLong_FromLong(be32(r + 12));
        items[2] = PyLong_FromLongLong(be64(r + 20));
        items[3] = PyLong_FromLongLong(base + pos);
        items[4] = PyLong_FromLong(sysflag);
        items[5] = PyLong_FromLongLong(be64(r + 56 + (born_v6 ? 12 : 0)));
        items[6] = PyLong_FromLongLong(be64(r + head - 12));
        items[7] = PyLong_FromLong(code);
        items[8] = Py_NewRef(topic);
        items[9] = bytes_or_none(&uniq);
        items[10] = bytes_or_none(&keys);
        items[11] = PyBytes_FromStringAndSize((const char *)props, props_len);
        int ok = 1;
        for (int i = 0; i < 12; i++) ok = ok && items[i] != NULL;
        if (ok && topic_special) { /* a timer's or a delayed record's tag code is a time: Python's */
            PyObject *call[5] = {topic, items[11], items[7], items[5], levels};
            PyObject *special_code = PyObject_Vectorcall(special, call, 5, NULL);
            if (special_code == NULL) {
                ok = 0;
            } else {
                Py_SETREF(items[7], special_code);
            }
        }
        PyObject *row = ok ? PyTuple_New(12) : NULL;
        if (row == NULL) {
            for (int i = 0; i < 12; i++) Py_XDECREF(items[i]);
            goto error;
        }
        for (int i = 0; i < 12; i++) PyTuple_SET_ITEM(row, i, items[i]);
        int appended = PyList_Append(rows, row);
        Py_DECREF(row);
        if (appended < 0) goto error;
        count++;
        room -= total;
        pos = end;
    }
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    if (pos != start) {
        PyObject *end_obj = PyLong_FromLongLong(pos);
        if (end_obj == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyObject *result = PyTuple_Pack(2, rows, end_obj);
        Py_DECREF(rows);
        Py_DECREF(end_obj);
        return result;
    }
hand_back: {
    PyObject *result = PyTuple_Pack(2, rows, pos_obj);
    Py_DECREF(rows);
    return result;
}
error:
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    Py_DECREF(rows);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_clean_batch", (PyCFunction)(void (*)(void))encode_clean_batch, METH_FASTCALL,
     "The stored records and dispatch facts of a clean send-batch body, or None."},
    {"encode_clean_single", (PyCFunction)(void (*)(void))encode_clean_single, METH_FASTCALL,
     "One sent message's stored record and dispatch facts, for clean properties, or None."},
    {"decode_header", (PyCFunction)(void (*)(void))decode_header, METH_FASTCALL,
     "A typed request header from its extFields, or the slow decoder's answer."},
    {"decode_frame", (PyCFunction)(void (*)(void))decode_frame, METH_FASTCALL,
     "A remoting frame with a JSON header as a RemotingCommand, or the slow decoder's answer."},
    {"java_hash", java_hash, METH_O, "Java's String.hashCode of a str."},
    {"java_ascii_hash", java_ascii_hash, METH_O, "Java's String.hashCode of ASCII bytes, or None."},
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL,
     "The rows of the sound records of a run in a buffer, and the position after them."},
    {"crc32", crc32, METH_O, "zlib.crc32 of a bytes-like object (the records' BODYCRC before masking)."},
    {"decode_records", (PyCFunction)(void (*)(void))ledgermq_decode_records, METH_FASTCALL,
     "A pull body's records (see _record_decode.c), or None for a buffer the Python loop reads."},
    {"index_put_run", (PyCFunction)(void (*)(void))ledgermq_index_put_run, METH_FASTCALL,
     "An index file's puts of a run of hashed keys (see _index_put.c), or None if it put none."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ledgermq._recordc",
                                    "Sent messages' records in C (see store/encoding.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__recordc(void) {
    crc_init();
    return PyModule_Create(&module);
}
