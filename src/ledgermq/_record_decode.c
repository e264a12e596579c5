/* A client's decode of pulled records, in C: protocol/message.py's ``decode_records`` was
 * ~2.5-3 us of Python per record (the header's struct, the body's copy and CRC, the topic
 * and properties text, the properties dict, the hosts' text, the MessageRecord), about a
 * third of a push consumer's CPU while it drains.
 *
 * It reads only the plain records: both hosts IPv4, every field consistent, and not a
 * compressed body the caller wants inflated. Every other record, a malformed one included,
 * goes to ``slow``, the Python ``decode_record``, at its position: it decodes it or raises
 * the RemoteProtocolError users see, with its message, so the records and errors are the
 * Python decoder's whatever the bytes (tests/protocol/test_record_decode_c.py holds the
 * two against each other).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_recordc.h"

#define DEC_HEAD 88                         /* the fixed fields up to BODYLENGTH, both hosts IPv4 */
#define DEC_MIN_TOTAL (DEC_HEAD + 3)        /* a topic length byte and a properties length */
#define DEC_MAGIC ((int32_t)0xDAA320A7u)    /* message.MESSAGE_MAGIC_CODE */
#define DEC_COMPRESSED 0x1                  /* sysflag.COMPRESSED */
#define DEC_HOSTS_V6 0x30                   /* sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6 */
#define DEC_FIELDS 16                       /* MessageRecord's positional fields, broker_name left out */

/* A pull body repeats a few hosts and topics: the last one's object is reused while its
 * bytes repeat (both immutable, so sharing them is invisible to the caller). The bytes are
 * copied, not pointed at, so nothing depends on the buffer staying as it was. */
typedef struct {
    unsigned char raw[8]; /* ip and port */
    PyObject *host;       /* (ip text, port), or NULL */
} HostCache;

typedef struct {
    unsigned char raw[255];
    unsigned int len;
    PyObject *text; /* or NULL */
} TopicCache;

typedef struct {
    HostCache born, store;
    TopicCache topic;
    PyObject *record_cls;
    int check_crc, inflate;
} Decoder;

/* ``unpack_host`` of an IPv4 address: (dotted decimal, signed port). */
static PyObject *host_of(HostCache *c, const unsigned char *p) {
    if (c->host != NULL && memcmp(c->raw, p, 8) == 0) return Py_NewRef(c->host);
    PyObject *ip = PyUnicode_FromFormat("%u.%u.%u.%u", (unsigned)p[0], (unsigned)p[1], (unsigned)p[2],
                                        (unsigned)p[3]);
    if (ip == NULL) return NULL;
    PyObject *port = PyLong_FromLong((long)be32(p + 4));
    if (port == NULL) {
        Py_DECREF(ip);
        return NULL;
    }
    PyObject *host = PyTuple_Pack(2, ip, port);
    Py_DECREF(ip);
    Py_DECREF(port);
    if (host == NULL) return NULL;
    memcpy(c->raw, p, 8);
    Py_XSETREF(c->host, Py_NewRef(host));
    return host;
}

static PyObject *topic_of(TopicCache *c, const unsigned char *p, unsigned int len) {
    if (c->text != NULL && c->len == len && memcmp(c->raw, p, len) == 0) return Py_NewRef(c->text);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)len, "replace");
    if (text == NULL) return NULL;
    memcpy(c->raw, p, len);
    c->len = len;
    Py_XSETREF(c->text, Py_NewRef(text));
    return text;
}

/* ``decode_properties`` of the bytes decoded as UTF-8 with replacement. It works on the
 * decoded text, not the bytes, so a segment's length is counted in code points as Python
 * counts it. */
static PyObject *properties_of(const unsigned char *s, Py_ssize_t n) {
    PyObject *props = PyDict_New();
    if (props == NULL || n == 0) return props;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "replace");
    if (text == NULL) goto error;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), start = 0;
    for (;;) {
        Py_ssize_t stop = PyUnicode_FindChar(text, 0x02, start, len, 1);
        if (stop == -2) goto error;
        Py_ssize_t seg_end = stop < 0 ? len : stop;
        if (seg_end - start >= 3) {
            Py_ssize_t sep = PyUnicode_FindChar(text, 0x01, start, seg_end, 1);
            if (sep == -2) goto error;
            if (sep > start && sep < seg_end - 1) { /* a separator, a key and a value */
                PyObject *key = PyUnicode_Substring(text, start, sep);
                PyObject *value = key ? PyUnicode_Substring(text, sep + 1, seg_end) : NULL;
                int set = value ? PyDict_SetItem(props, key, value) : -1;
                Py_XDECREF(key);
                Py_XDECREF(value);
                if (set < 0) goto error;
            }
        }
        if (stop < 0) break;
        start = stop + 1;
    }
    Py_DECREF(text);
    return props;
error:
    Py_XDECREF(text);
    Py_DECREF(props);
    return NULL;
}

/* The fields of the plain record at ``r`` (``avail`` bytes to the buffer's end) as
 * MessageRecord's arguments: 1 with *total set, 0 if the record is not plain (Python's,
 * nothing made), -1 on an error (nothing left to release). */
static int plain_fields(Decoder *d, const unsigned char *r, Py_ssize_t avail, PyObject **f, int32_t *total) {
    if (avail < DEC_MIN_TOTAL) return 0;
    int32_t size = be32(r), sysflag = be32(r + 36), crc = be32(r + 8), body_len = be32(r + DEC_HEAD - 4);
    if (be32(r + 4) != DEC_MAGIC || size > avail || size < DEC_MIN_TOTAL) return 0;
    if ((sysflag & DEC_HOSTS_V6) || (d->inflate && (sysflag & DEC_COMPRESSED))) return 0;
    if (body_len < 0 || body_len > size - DEC_MIN_TOTAL) return 0;
    const unsigned char *body = r + DEC_HEAD;
    if (d->check_crc && (int32_t)(ledgermq_crc32(body, body_len) & 0x7FFFFFFFu) != crc) return 0;
    Py_ssize_t p = DEC_HEAD + body_len; /* the topic's length byte */
    unsigned int topic_len = r[p];
    Py_ssize_t q = p + 1 + topic_len; /* the properties' length */
    if (q + 2 > size) return 0;
    int16_t props_len = (int16_t)(uint16_t)(r[q] << 8 | r[q + 1]);
    if (props_len < 0 || q + 2 + props_len != size) return 0;

    f[0] = topic_of(&d->topic, r + p + 1, topic_len);
    f[1] = PyBytes_FromStringAndSize((const char *)body, body_len);
    f[2] = PyLong_FromLong(be32(r + 12));
    f[3] = PyLong_FromLong(be32(r + 16));
    f[4] = PyLong_FromLongLong(be64(r + 20));
    f[5] = PyLong_FromLongLong(be64(r + 28));
    f[6] = PyLong_FromLong(sysflag);
    f[7] = PyLong_FromLongLong(be64(r + 40));
    f[8] = host_of(&d->born, r + 48);
    f[9] = PyLong_FromLongLong(be64(r + 56));
    f[10] = host_of(&d->store, r + 64);
    f[11] = PyLong_FromLong(be32(r + 72));
    f[12] = PyLong_FromLongLong(be64(r + 76));
    f[13] = properties_of(r + q + 2, props_len);
    f[14] = PyLong_FromLong(crc);
    f[15] = PyLong_FromLong(size);
    for (int i = 0; i < DEC_FIELDS; i++) {
        if (f[i] == NULL) {
            for (int j = 0; j < DEC_FIELDS; j++) Py_XDECREF(f[j]);
            return -1;
        }
    }
    *total = size;
    return 1;
}

/* The record at ``pos``: decoded here if plain, else by ``slow(buf, pos, check_crc=...,
 * inflate=...)``. NULL with an error set (the slow path's RemoteProtocolError among them). */
static PyObject *record_at(Decoder *d, const unsigned char *b, Py_ssize_t len, Py_ssize_t pos,
                           PyObject *const *args, Py_ssize_t *step) {
    static PyObject *kwnames = NULL; /* ("check_crc", "inflate"), made once */
    PyObject *f[DEC_FIELDS];
    int32_t total = 0;
    int plain = plain_fields(d, b + pos, len - pos, f, &total);
    if (plain < 0) return NULL;
    if (plain > 0) {
        PyObject *record = PyObject_Vectorcall(d->record_cls, f, DEC_FIELDS, NULL);
        for (int i = 0; i < DEC_FIELDS; i++) Py_DECREF(f[i]);
        *step = total;
        return record;
    }
    if (kwnames == NULL && (kwnames = Py_BuildValue("(ss)", "check_crc", "inflate")) == NULL) return NULL;
    PyObject *pos_obj = PyLong_FromSsize_t(pos);
    if (pos_obj == NULL) return NULL;
    PyObject *call[4] = {args[0], pos_obj, args[1], args[2]};
    PyObject *record = PyObject_Vectorcall(args[4], call, 2, kwnames);
    Py_DECREF(pos_obj);
    if (record == NULL) return NULL;
    PyObject *size = PyObject_GetAttrString(record, "store_size");
    *step = size ? PyLong_AsSsize_t(size) : -1;
    Py_XDECREF(size);
    if (*step <= 0) { /* decode_record's records are 91 bytes or more: not one of them */
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "decode_records: a record without a size");
        Py_DECREF(record);
        return NULL;
    }
    return record;
}

/* decode_records(buf, check_crc, inflate, record_cls, slow) -> list | None
 *
 * protocol/message.py's ``decode_records``: the records of ``buf`` back to back, each
 * built as ``record_cls(...)`` with MessageRecord's 16 positional fields. None for a
 * buffer that is not plain bytes (not contiguous, items other than unsigned bytes): the
 * Python loop reads those, as it reads them in Python alone. */
PyObject *ledgermq_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_records takes 5 arguments");
        return NULL;
    }
    Decoder d;
    memset(&d, 0, sizeof d);
    d.record_cls = args[3];
    if ((d.check_crc = PyObject_IsTrue(args[1])) < 0 || (d.inflate = PyObject_IsTrue(args[2])) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear(); /* the Python loop reads it, or says why not */
        Py_RETURN_NONE;
    }
    if (view.ndim != 1 || view.itemsize != 1 || (view.format != NULL && strcmp(view.format, "B") != 0)) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    PyObject *out = PyList_New(0);
    Py_ssize_t pos = 0;
    while (out != NULL && pos < view.len) {
        Py_ssize_t step = 0;
        PyObject *record = record_at(&d, b, view.len, pos, args, &step);
        if (record == NULL || PyList_Append(out, record) < 0) Py_CLEAR(out);
        Py_XDECREF(record);
        pos += step;
    }
    Py_XDECREF(d.born.host);
    Py_XDECREF(d.store.host);
    Py_XDECREF(d.topic.text);
    PyBuffer_Release(&view);
    return out;
}
