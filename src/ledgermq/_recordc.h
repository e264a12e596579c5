/* What the source files of ledgermq._recordc share: _recordc.c (sent records, headers,
 * frames, the reput's scan; it owns the CRC table and the module), _record_decode.c (a
 * client's decode of pulled records) and _index_put.c (the index file's puts). One CRC table, filled once at import, serves both. */
#ifndef LEDGERMQ_RECORDC_H
#define LEDGERMQ_RECORDC_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>

/* zlib.crc32(data), unmasked; the table is filled by the module's init (_recordc.c). */
uint32_t ledgermq_crc32(const unsigned char *p, Py_ssize_t n);

/* The record fields are big-endian Java ints and longs. */
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)(uint32_t)be32(p) << 32 | (uint64_t)(uint32_t)be32(p + 4));
}

/* decode_records(buf, check_crc, inflate, record_cls, slow) (_record_decode.c). */
PyObject *ledgermq_decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* index_put_run(mm, slots, max_entries, count, slot_count, begin_phy, begin_ts, end_phy,
 * end_ts, flat, start): an index file's puts of a run of hashed keys (_index_put.c). */
PyObject *ledgermq_index_put_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
