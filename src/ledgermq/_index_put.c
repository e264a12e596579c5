/* The index file's per-key put, in C: store/index.py's ``IndexFile.put_hashed`` was ~1 us
 * of interpreter work per key, one or two keys per message, the largest per-message Python
 * cost left on batch sends on both the master (``build_staged``) and a replica
 * (``build_rows``). ``index_put_run`` puts a run of already hashed keys into one file's
 * mmap, byte for byte as ``put_hashed`` does (``put_hashed`` stays the reference and the
 * pure-Python path; tests/store/test_index_put_c.py holds the two against each other).
 *
 * It stops at the first key it cannot put the way ``put_hashed`` would without doubt: the
 * file is full (the caller rolls), or a value does not fit the C types the layout needs
 * (the caller hands that key to ``put_hashed``, which puts it or raises as it always did).
 * Nothing is written for a key it stops at, so the state it returns is exact.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_recordc.h"

#define IDX_HEADER 40
#define IDX_SLOT 4
#define IDX_ENTRY 20
#define IDX_INT_MAX 0x7FFFFFFFLL
#define IDX_CHAIN_STEPS 64 /* IndexFile._newest_before's bound */

static inline void put_be32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void put_be64(unsigned char *p, int64_t v) {
    put_be32(p, (int32_t)(uint32_t)((uint64_t)v >> 32));
    put_be32(p + 4, (int32_t)(uint32_t)(uint64_t)v);
}

/* An int argument as int64; 0 with no error set when it does not fit (the caller declines). */
static int as_i64(PyObject *o, int64_t *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* not an int: put_hashed raises its own error for it */
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

/* The run's file: its geometry, the mmap, and the header fields put_hashed moves. */
typedef struct {
    unsigned char *mm;
    int64_t slots, max_entries, count, slot_count, begin_phy, begin_ts, end_phy, end_ts;
} IdxState;

/* IndexFile._newest_before: a slot pointing at or past ``count`` (entries written, header
 * not, before a crash) leads back through the stale entries' own chains. */
static int64_t newest_before(const IdxState *s, int64_t idx) {
    const unsigned char *entries = s->mm + IDX_HEADER + s->slots * IDX_SLOT;
    int steps = 0;
    while (idx >= s->count && steps < IDX_CHAIN_STEPS) {
        if (idx >= s->max_entries) return 0;
        idx = be32(entries + idx * IDX_ENTRY + 16);
        steps++;
    }
    return (0 < idx && idx < s->count) ? idx : 0;
}

/* ``(store_ts - begin_ts) // 1000`` clamped to [0, INT_MAX], 0 while begin_ts <= 0.
 * Floor or truncation only differ for negatives, which clamp to 0 either way. */
static int32_t time_diff(int64_t begin_ts, int64_t store_ts) {
    if (begin_ts <= 0) return 0;
    int64_t delta;
    if (__builtin_sub_overflow(store_ts, begin_ts, &delta)) return store_ts > begin_ts ? (int32_t)IDX_INT_MAX : 0;
    if (delta < 0) return 0;
    delta /= 1000;
    return delta > IDX_INT_MAX ? (int32_t)IDX_INT_MAX : (int32_t)delta;
}

/* put_hashed for one key, the file known not full. */
static void put_one(IdxState *s, int64_t java_hash, int64_t phy, int64_t ts) {
    int64_t key_hash = (java_hash > IDX_INT_MAX || java_hash < -IDX_INT_MAX) ? 0 : (java_hash < 0 ? -java_hash : java_hash);
    unsigned char *slot = s->mm + IDX_HEADER + (key_hash % s->slots) * IDX_SLOT;
    int64_t prev = be32(slot);
    if (prev >= s->count)
        prev = newest_before(s, prev);
    else if (prev < 0)
        prev = 0;
    int32_t diff = time_diff(s->begin_ts, ts);
    unsigned char *entry = s->mm + IDX_HEADER + s->slots * IDX_SLOT + s->count * IDX_ENTRY;
    put_be32(entry, (int32_t)key_hash);
    put_be64(entry + 4, phy);
    put_be32(entry + 12, diff);
    put_be32(entry + 16, (int32_t)prev);
    put_be32(slot, (int32_t)s->count);
    if (s->count <= 1) {
        s->begin_phy = phy;
        s->begin_ts = ts; /* later entries of this run measure their diff from it */
    }
    if (prev == 0) s->slot_count++;
    s->count++;
    if (phy >= s->end_phy) {
        s->end_phy = phy;
        if (ts > s->end_ts) s->end_ts = ts;
    }
}

/* Whether the header state is one the C put reproduces exactly (else put_hashed does). */
static int state_ok(const IdxState *s, Py_ssize_t mm_len) {
    if (s->slots <= 0 || s->slots > (1LL << 40) || s->max_entries <= 0 || s->max_entries > IDX_INT_MAX) return 0;
    if (s->count < 1 || s->slot_count < INT64_MIN + 1 || s->slot_count > INT64_MAX - IDX_INT_MAX) return 0;
    return IDX_HEADER + s->slots * IDX_SLOT + s->max_entries * IDX_ENTRY <= (int64_t)mm_len;
}

/* index_put_run(mm, slots, max_entries, count, slot_count, begin_phy, begin_ts, end_phy,
 *               end_ts, flat, start)
 *   -> (put, count, slot_count, begin_phy, begin_ts, end_phy, end_ts) | None
 * Puts keys start, start+1, ... of ``flat`` ([java_hash, phy, store_ts] per key) until the
 * file is full or a key needs put_hashed; None when it put none. The caller stores the
 * state back on the IndexFile and marks it dirty. */
PyObject *ledgermq_index_put_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "index_put_run takes 11 arguments");
        return NULL;
    }
    PyObject *flat = args[9];
    if (!PyList_Check(flat)) {
        PyErr_SetString(PyExc_TypeError, "index_put_run: flat must be a list");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[10]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    IdxState s;
    int64_t *fields[] = {&s.slots, &s.max_entries, &s.count, &s.slot_count, &s.begin_phy, &s.begin_ts, &s.end_phy, &s.end_ts};
    for (int k = 0; k < 8; k++)
        if (!as_i64(args[1 + k], fields[k])) Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return NULL;
    if (!state_ok(&s, view.len)) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    s.mm = (unsigned char *)view.buf;
    Py_ssize_t n = PyList_GET_SIZE(flat) / 3, at = start < 0 ? n : start;
    for (; at < n && s.count < s.max_entries; at++) {
        int64_t h, phy, ts;
        if (!as_i64(PyList_GET_ITEM(flat, 3 * at), &h) || !as_i64(PyList_GET_ITEM(flat, 3 * at + 1), &phy) ||
            !as_i64(PyList_GET_ITEM(flat, 3 * at + 2), &ts))
            break;
        put_one(&s, h, phy, ts);
    }
    PyBuffer_Release(&view);
    if (at <= start || start < 0) Py_RETURN_NONE;
    return Py_BuildValue("(nLLLLLL)", at - start, (long long)s.count, (long long)s.slot_count, (long long)s.begin_phy,
                         (long long)s.begin_ts, (long long)s.end_phy, (long long)s.end_ts);
}
