# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The JSON text of a magic-2 batch's records, written straight from the record bytes.

The export's record loop (`record_reader.read_records`) builds one dict per record, and
orjson then writes it out: most of a full export's CPU went into making and freeing those
dicts (docs/performance.md). This module writes the same text, byte for byte, without any
Python object per record or batch: `encode_batch` writes the batch object
`BatchHeader.to_json` makes, `{"base_offset":...,"records":[{"offset":...},...],
"diagnostics":[]}`, into a C buffer, walking the records as `read_records` does.

It vouches only for records that decode without a single diagnostic: on anything the
reference loop would report or treat specially (a bad length or varint, bytes left over, a
varint longer than 4 bytes (9 for the timestamp delta), a sum beyond 64 bits, the record
limit or decode budget reached) it returns None and the caller runs `read_records`, which
decides. Values must not be truncated (`limits.max_value_bytes` unset) and the batch must
not be a control batch; the caller checks both.

Compiled with Cython by `python tools/compile.py` (optional); without it the export builds
the dicts as before. `tests/unit/records/test_record_text.py` compares its bytes with the
dict path's on random batches.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from dissectors.record_values import iso_timestamp

cdef struct Out:
    char *buf
    Py_ssize_t n
    Py_ssize_t cap


cdef int _grow(Out *o, Py_ssize_t need) except -1:
    """Room for `need` more bytes."""
    cdef Py_ssize_t cap = o.cap * 2
    if cap < o.n + need + 256:
        cap = o.n + need + 256
    cdef char *p = <char *> realloc(o.buf, cap)
    if p == NULL:
        raise MemoryError()
    o.buf = p
    o.cap = cap
    return 0


cdef inline int _put(Out *o, const char *s, Py_ssize_t n) except -1:
    if o.n + n > o.cap:
        _grow(o, n)
    memcpy(o.buf + o.n, s, n)
    o.n += n
    return 0


cdef int _put_int(Out *o, int64_t v) except -1:
    """A signed 64-bit integer in decimal (as `str(int)`)."""
    cdef char tmp[24]
    cdef int i = 24
    cdef uint64_t u
    if v < 0:
        u = <uint64_t> 0 - <uint64_t> v
    else:
        u = <uint64_t> v
    while True:
        i -= 1
        tmp[i] = <char> (48 + u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        tmp[i] = b'-'
    return _put(o, tmp + i, 24 - i)


cdef const char *_HEX = b"0123456789abcdef"
cdef const char *_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


# per ASCII byte: 0 copied as is, else the letter of its escape ('u': \u00xx)
cdef char _ESC[128]
for _c in range(128):
    _ESC[_c] = 0
for _c in range(32):
    _ESC[_c] = b'u'
_ESC[0x08] = b'b'
_ESC[0x09] = b't'
_ESC[0x0A] = b'n'
_ESC[0x0C] = b'f'
_ESC[0x0D] = b'r'
_ESC[0x22] = b'"'
_ESC[0x5C] = b'\\'

import sys

cdef bint _LE = sys.byteorder == "little"  # the word-at-a-time skip reads bytes little-endian
cdef uint64_t _ONES = 0x0101010101010101
cdef uint64_t _HIGH = 0x8080808080808080


cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil


# 16 bytes at a time where SSE2 is there (every x86-64): the mask of the bytes that need a look
# is exact (a compare per kind), so a value's quotes cost a load and three compares each, not
# the word trick's borrow chain; elsewhere KA_LOOK16 is 0 and the 8-byte loop does it all
cdef extern from *:
    """
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #define KA_LOOK16 1
    static inline unsigned int ka_look16(const unsigned char *s, char *w) {
        __m128i x = _mm_loadu_si128((const __m128i *) s);
        _mm_storeu_si128((__m128i *) w, x);
        __m128i q = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x22));
        __m128i b = _mm_cmpeq_epi8(x, _mm_set1_epi8(0x5C));
        __m128i c = _mm_cmplt_epi8(x, _mm_set1_epi8(0x20));  /* signed: below 0x20, or >= 0x80 */
        return (unsigned int) _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(q, b), c));
    }
    #else
    #define KA_LOOK16 0
    static inline unsigned int ka_look16(const unsigned char *s, char *w) { return 0xFFFFu; }
    #endif
    """
    bint KA_LOOK16
    unsigned int ka_look16(const uint8_t *s, char *w) noexcept nogil


cdef inline uint64_t _look8(uint64_t x) noexcept nogil:
    """Of 8 bytes (little-endian), a mask whose lowest set bit is in the first byte that needs
    a look (not ASCII, below 0x20, '"' or backslash), 0 when none does (the usual word tricks:
    a borrow may flag a later byte too, never an earlier one)."""
    cdef uint64_t q = x ^ (_ONES * 0x22)
    cdef uint64_t b = x ^ (_ONES * 0x5C)
    return (x | ((x - _ONES * 0x20) & ~x) | ((q - _ONES) & ~q) | ((b - _ONES) & ~b)) & _HIGH


cdef inline Py_ssize_t _utf8_seq(const uint8_t *s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """The length of the UTF-8 sequence at s[i] (a byte >= 0x80) as Python's strict decoder
    takes it (no overlong forms, no surrogates, nothing above U+10FFFF, nothing cut), or 0."""
    cdef uint8_t c = s[i], c1
    if c < 0xC2:
        return 0
    if c < 0xE0:
        if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
            return 0
        return 2
    if c < 0xF0:
        if i + 2 >= n:
            return 0
        c1 = s[i + 1]
        if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
            return 0
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
            return 0
        return 3
    if c > 0xF4 or i + 3 >= n:
        return 0
    c1 = s[i + 1]
    if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
        return 0
    if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
        return 0
    return 4


cdef bint _put_text(Out *o, const uint8_t *s, Py_ssize_t n) except -1:
    """s[:n] as a JSON string when it is UTF-8 (True), with `"`, backslash and control
    characters escaped as json and orjson escape them (\\b \\t \\n \\f \\r, else \\u00xx) and
    everything else as it is; False (nothing written) when it is not UTF-8."""
    if o.n + 6 * n + 2 > o.cap:
        _grow(o, 6 * n + 2)
    cdef char *w = o.buf + o.n
    cdef Py_ssize_t i = 0, k
    cdef uint8_t c
    cdef char e
    cdef uint64_t x, m
    cdef unsigned int m16
    w[0] = b'"'
    w += 1
    while i < n:
        if KA_LOOK16 and i + 16 <= n:
            m16 = ka_look16(s + i, w)  # stores the 16 bytes (room: as below)
            if m16 == 0:
                w += 16
                i += 16
                continue
            k = __builtin_ctzll(m16)  # the bytes before the first to look at are plain
            w += k
            i += k
        elif _LE and i + 8 <= n:
            memcpy(&x, s + i, 8)
            memcpy(w, &x, 8)  # room for it: 6 bytes are kept for each byte still to write
            m = _look8(x)
            if m == 0:
                w += 8
                i += 8
                continue
            k = __builtin_ctzll(m) >> 3  # the bytes before the first to look at are plain
            w += k
            i += k
        c = s[i]
        if c < 0x80:
            e = _ESC[c]
            if e == 0:
                w[0] = <char> c
                w += 1
            elif e == b'u':
                w[0] = b'\\'
                w[1] = b'u'
                w[2] = b'0'
                w[3] = b'0'
                w[4] = _HEX[c >> 4]
                w[5] = _HEX[c & 15]
                w += 6
            else:
                w[0] = b'\\'
                w[1] = e
                w += 2
            i += 1
        else:
            k = _utf8_seq(s, i, n)
            if k == 0:
                return False
            memcpy(w, s + i, k)
            w += k
            i += k
    w[0] = b'"'
    w += 1
    o.n = w - o.buf
    return True


cdef int _put_b64(Out *o, const uint8_t *s, Py_ssize_t n) except -1:
    """`{"b64":"<base64>"}`, as `record_values.render_bytes` renders bytes that are not UTF-8."""
    cdef Py_ssize_t size = ((n + 2) // 3) * 4
    if o.n + size + 12 > o.cap:
        _grow(o, size + 12)
    _put(o, b'{"b64":"', 8)
    cdef char *w = o.buf + o.n
    cdef Py_ssize_t i = 0
    cdef unsigned int v
    while i + 3 <= n:
        v = (s[i] << 16) | (s[i + 1] << 8) | s[i + 2]
        w[0] = _B64[(v >> 18) & 63]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = _B64[(v >> 6) & 63]
        w[3] = _B64[v & 63]
        w += 4
        i += 3
    if n - i == 1:
        v = s[i] << 16
        w[0] = _B64[(v >> 18) & 63]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = b'='
        w[3] = b'='
        w += 4
    elif n - i == 2:
        v = (s[i] << 16) | (s[i + 1] << 8)
        w[0] = _B64[(v >> 18) & 63]
        w[1] = _B64[(v >> 12) & 63]
        w[2] = _B64[(v >> 6) & 63]
        w[3] = b'='
        w += 4
    o.n = w - o.buf
    return _put(o, b'"}', 2)


cdef int _put_bytes(Out *o, const uint8_t *s, Py_ssize_t n) except -1:
    """A key, value or header value of n >= 0 bytes: text when UTF-8, else base64."""
    if _put_text(o, s, n):
        return 0
    return _put_b64(o, s, n)


# what _varint returns besides OK: the varint runs past `end` (a cut batch stops there), or it
# is longer than this module takes (the reference loop decides)
cdef enum:
    OK = 0
    CUT = 1
    ODD = 2


cdef inline int _varint(
    const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, int most, int64_t *out
) noexcept nogil:
    """A zig-zag varint of at most `most` bytes (4: 28 bits, 9: 63 bits) at pos[0]."""
    cdef uint64_t u = 0
    cdef int shift = 0
    cdef int k
    cdef Py_ssize_t p = pos[0]
    cdef uint8_t b
    for k in range(most):
        if p >= end:
            return CUT
        b = d[p]
        p += 1
        u |= (<uint64_t> (b & 0x7F)) << shift
        if b < 0x80:
            pos[0] = p
            out[0] = <int64_t> (u >> 1) ^ -(<int64_t> (u & 1))
            return OK
        shift += 7
    if p >= end:
        return CUT
    return ODD


cdef inline bint _add(int64_t a, int64_t b, int64_t *out) noexcept nogil:
    """a + b when it fits in 64 bits."""
    if (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b):
        return False
    out[0] = a + b
    return True


# the encoders' buffer, kept between calls (up to _KEEP bytes: a fresh one per batch costs the
# kernel's page faults and zeroing for each large batch); the GIL is held throughout
cdef Out _buf = Out(NULL, 0, 0)
cdef Py_ssize_t _KEEP = 8 * 1024 * 1024

# the last second a timestamp fell in and its "YYYY-MM-DDTHH:MM:SS" (`iso_timestamp`'s
# prefix; _sec_ok False: out of range, null): a record's time is then written in C, where a
# batch's records, each a few ms apart, used to look their text up one by one
cdef int64_t _sec = INT64_MIN
cdef bint _sec_set = False
cdef bint _sec_ok = False
cdef char _sec_text[19]


cdef int _put_time(Out *o, int64_t ts) except -1:
    """The JSON text of `iso_timestamp(ts)`: quoted ISO-8601, or null."""
    global _sec, _sec_set, _sec_ok
    if ts == -1:
        return _put(o, b"null", 4)
    cdef int64_t sec = ts // 1000  # floor division (cdivision: C truncates; fixed below)
    cdef int64_t milli = ts - sec * 1000
    if milli < 0:
        sec -= 1
        milli += 1000
    if not _sec_set or sec != _sec:
        iso = iso_timestamp(<object> sec * 1000)
        _sec_ok = iso is not None
        if _sec_ok:
            text = (<str> iso).encode("ascii")
            memcpy(_sec_text, PyBytes_AS_STRING(text), 19)
        _sec = sec
        _sec_set = True
    if not _sec_ok:
        return _put(o, b"null", 4)
    if o.n + 26 > o.cap:
        _grow(o, 26)
    cdef char *w = o.buf + o.n
    w[0] = b'"'
    memcpy(w + 1, _sec_text, 19)
    w[20] = b'.'
    w[21] = <char> (48 + milli // 100)
    w[22] = <char> (48 + (milli // 10) % 10)
    w[23] = <char> (48 + milli % 10)
    w[24] = b'Z'
    w[25] = b'"'
    o.n += 26
    return 0


cdef int _records(
    Out *o,
    const uint8_t *d,
    Py_ssize_t pos,
    Py_ssize_t end,
    int64_t base_offset,
    int64_t base_ts,
    bint has_la,
    int64_t la,
    const char *tstype,
    Py_ssize_t tstype_n,
    Py_ssize_t limit,
    bint cut,
    Py_ssize_t *found,
) except -1:
    """The records in d[pos:end] as the JSON text of their list, appended to o; 1 when the
    reference loop must decide (o is then left as it is, to be dropped), else 0 and their
    count in found[0]. Mirrors `record_reader.read_records` (see the module docstring)."""
    cdef Py_ssize_t idx = 0, rec_end, key_off, value_off, hk, hv
    cdef int64_t length, ts_delta, offset_delta, key_len, value_len, count, hk_len, hv_len
    cdef int64_t offset, ts, j
    cdef int r, attributes
    _put(o, b"[", 1)
    while pos < end:
        if idx >= limit:
            return 1
        r = _varint(d, &pos, end, 4, &length)
        if r != OK:
            if r == CUT and cut:
                break
            return 1
        rec_end = pos + length
        if length <= 0 or rec_end > end:
            if cut and rec_end > end:
                break
            return 1
        # attributes, timestamp delta, offset delta, key, value, header count
        attributes = d[pos]
        pos += 1
        if _varint(d, &pos, rec_end, 9, &ts_delta) != OK:
            return 1
        if _varint(d, &pos, rec_end, 4, &offset_delta) != OK:
            return 1
        if _varint(d, &pos, rec_end, 4, &key_len) != OK:
            return 1
        key_off = pos
        if key_len > 0:
            if key_len > rec_end - pos:
                return 1
            pos += key_len
        elif key_len < -1:
            return 1
        if _varint(d, &pos, rec_end, 4, &value_len) != OK:
            return 1
        value_off = pos
        if value_len > 0:
            if value_len > rec_end - pos:
                return 1
            pos += value_len
        elif value_len < -1:
            return 1
        if _varint(d, &pos, rec_end, 4, &count) != OK:
            return 1
        if count != 0 and (count < 0 or count > (rec_end - pos) // 2):
            return 1
        if has_la:
            ts = la
        elif not _add(base_ts, ts_delta, &ts):
            return 1
        if not _add(base_offset, offset_delta, &offset):
            return 1
        # the record, keys in the reference loop's order
        if idx:
            _put(o, b',{"offset":', 11)
        else:
            _put(o, b'{"offset":', 10)
        _put_int(o, offset)
        _put(o, b',"offset_delta":', 16)
        _put_int(o, offset_delta)
        _put(o, b',"timestamp":', 13)
        _put_time(o, ts)
        _put(o, b',"timestamp_ms":', 16)
        _put_int(o, ts)
        _put(o, b',"timestamp_type":', 18)
        _put(o, tstype, tstype_n)
        _put(o, b',"attributes":', 14)
        _put_int(o, attributes)
        _put(o, b',"key":', 7)
        if key_len < 0:
            _put(o, b"null", 4)
        else:
            _put_bytes(o, d + key_off, key_len)
        _put(o, b',"value":', 9)
        if value_len < 0:
            _put(o, b"null", 4)
        else:
            _put_bytes(o, d + value_off, value_len)
        _put(o, b',"headers":[', 12)
        j = 0
        while j < count:
            if _varint(d, &pos, rec_end, 4, &hk_len) != OK or hk_len < 0:
                return 1
            if hk_len > rec_end - pos:
                return 1
            hk = pos
            pos += hk_len
            if _varint(d, &pos, rec_end, 4, &hv_len) != OK:
                return 1
            hv = pos
            if hv_len > 0:
                if hv_len > rec_end - pos:
                    return 1
                pos += hv_len
            elif hv_len < -1:
                return 1
            if j:
                _put(o, b',{"key":', 8)
            else:
                _put(o, b'{"key":', 7)
            _put_bytes(o, d + hk, hk_len)
            _put(o, b',"value":', 9)
            if hv_len < 0:
                _put(o, b"null", 4)
            else:
                _put_bytes(o, d + hv, hv_len)
            _put(o, b"}", 1)
            j += 1
        _put(o, b"]}", 2)
        if pos != rec_end:
            return 1
        idx += 1
        pos = rec_end
    _put(o, b"]", 1)
    found[0] = idx
    return 0


cdef inline void _take(Out *o, Py_ssize_t need) except *:
    """The shared buffer into o, emptied, with room for `need` bytes."""
    o[0] = _buf
    o.n = 0
    if o.cap < need:
        _grow(o, need)


cdef inline void _give(Out *o) noexcept:
    """o back as the shared buffer (freed instead when it grew past _KEEP bytes)."""
    global _buf
    if o.cap > _KEEP:
        free(o.buf)
        o.buf = NULL
        o.cap = 0
    _buf = o[0]


cdef inline int64_t _be(const uint8_t *p, int n) noexcept nogil:
    """The big-endian two's-complement integer of n bytes at p."""
    cdef uint64_t u = 0
    cdef int k
    for k in range(n):
        u = (u << 8) | p[k]
    if n < 8 and (u >> (8 * n - 1)) & 1:
        u -= (<uint64_t> 1) << (8 * n)
    return <int64_t> u


cdef inline int _field(Out *o, const char *key, Py_ssize_t n, int64_t value) except -1:
    _put(o, key, n)
    return _put_int(o, value)


cdef inline int _flag(Out *o, const char *key, Py_ssize_t n, bint value) except -1:
    _put(o, key, n)
    if value:
        return _put(o, b"true", 4)
    return _put(o, b"false", 5)


def encode_batch(
    bytes head,
    Py_ssize_t at,
    object crc_ok,
    bint partial,
    bytes codec_json,
    bytes data,
    Py_ssize_t pos,
    Py_ssize_t end,
    Py_ssize_t limit,
    bint cut,
):
    """A whole magic-2 batch as the JSON text of the object `BatchHeader.to_json` gives for it
    with its records, and how many records: `(text, count)`, or None when the reference loop
    must decide (see the module docstring). The header is read from head[at:at + 61], the
    records from data[pos:end] (the batch's own bytes, or its decompressed ones); `crc_ok`
    True, False or None; `codec_json` the codec's name as JSON text; `limit` the most records
    to decode (the record limit and the decode budget); `cut`: the bytes stop early (a
    partial batch), so a record running past `end` ends the list instead of being an error.
    Not for control batches (the caller checks)."""
    if at < 0 or at + 61 > PyBytes_GET_SIZE(head):
        return None
    if pos < 0 or end > PyBytes_GET_SIZE(data) or pos > end:
        return None
    cdef const uint8_t *h = <const uint8_t *> PyBytes_AS_STRING(head) + at
    cdef int64_t attributes = _be(h + 21, 2)
    cdef int64_t base_ts = _be(h + 27, 8)
    cdef int64_t max_ts = _be(h + 35, 8)
    cdef bint log_append = (attributes & 0x08) != 0
    cdef const char *tstype = b'"log_append"' if log_append else b'"create"'
    cdef Py_ssize_t tstype_n = 12 if log_append else 8
    cdef Py_ssize_t found = 0
    cdef Out o
    _take(&o, 1024 + (end - pos) * 2)
    try:
        _field(&o, b'{"base_offset":', 15, _be(h, 8))
        _field(&o, b',"batch_length":', 16, _be(h + 8, 4))
        _field(&o, b',"partition_leader_epoch":', 26, _be(h + 12, 4))
        _field(&o, b',"magic":', 9, _be(h + 16, 1))
        _field(&o, b',"crc":', 7, _be(h + 17, 4) & 0xFFFFFFFF)
        _put(&o, b',"crc_ok":', 10)
        if crc_ok is None:
            _put(&o, b"null", 4)
        elif crc_ok:
            _put(&o, b"true", 4)
        else:
            _put(&o, b"false", 5)
        _field(&o, b',"attributes":', 14, attributes)
        _put(&o, b',"codec":', 9)
        _put(&o, PyBytes_AS_STRING(codec_json), PyBytes_GET_SIZE(codec_json))
        _put(&o, b',"timestamp_type":', 18)
        _put(&o, tstype, tstype_n)
        _flag(&o, b',"is_transactional":', 20, (attributes & 0x10) != 0)
        _flag(&o, b',"is_control":', 14, (attributes & 0x20) != 0)
        _flag(&o, b',"has_delete_horizon":', 22, (attributes & 0x40) != 0)
        _field(&o, b',"last_offset_delta":', 21, _be(h + 23, 4))
        _field(&o, b',"base_timestamp":', 18, base_ts)
        _field(&o, b',"max_timestamp":', 17, max_ts)
        _field(&o, b',"producer_id":', 15, _be(h + 43, 8))
        _field(&o, b',"producer_epoch":', 18, _be(h + 51, 2))
        _field(&o, b',"base_sequence":', 17, _be(h + 53, 4))
        _field(&o, b',"record_count":', 16, _be(h + 57, 4))
        _flag(&o, b',"partial":', 11, partial)
        _put(&o, b',"records":', 11)
        if _records(
            &o, <const uint8_t *> PyBytes_AS_STRING(data), pos, end, _be(h, 8), base_ts,
            log_append, max_ts, tstype, tstype_n, limit, cut, &found,
        ):
            return None
        _put(&o, b',"diagnostics":[]}', 18)
        return PyBytes_FromStringAndSize(o.buf, o.n), found
    finally:
        _give(&o)
