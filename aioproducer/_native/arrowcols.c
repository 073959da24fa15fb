/* aioproducer._native.arrowcols: Arrow rows of a key and a value sent without a Python
 * object per row.
 *
 * The Spark data source sends each Arrow batch with send_many. Made the obvious way, the
 * columns' to_pylist() (zipped into (key, value) tuples when there are keys), each row
 * costs a bytes object per column (and a tuple), made, read again by the partitioner and
 * the record encoder, and freed: about 1.1 us per keyed 100-byte row in the worker, 0.3
 * without a key (bench/README.md).
 *
 * A BinaryPairs holds the columns' buffers (validity bitmap, offsets, data: the layout of
 * Arrow's binary, string, large_binary and large_string) and is what send_many takes
 * instead of a list. Its methods do the per-row work of the bulk paths over the buffers
 * (RecordAppender.append_pairs and append_values in aioproducer/_core/appender.py have the
 * same steps over tuples and bytes): group() partitions a run of keyed rows as the Java
 * client does (murmur2 of the key), and encode() writes rows as record batch v2 records into
 * one bytes object that the batch copies in with its other records, packing as it goes the
 * key and value sizes that the records' metadata reports. Rows without a key column (keys
 * None) go as a run to the partition the sticky partitioner picks, as plain values do:
 * encode() takes them in order (places None), and value_bytes() is what the partitioner is
 * told they added. As a sequence it is the (key, value) tuples, made on demand (None for a
 * null), for whatever takes the general path.
 *
 * Every offset is checked against the buffers' sizes when the object is made (a malformed
 * column raises ValueError before any row is sent) and again each time a row is read, since
 * a writable buffer may change while it is held: no row is read, nor a record written, out
 * of bounds.
 *
 * Built only with the mypyc-compiled modules (setup.py); without it the data source hands
 * send_many lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One Arrow binary column: its buffers, held as views for the call. */
typedef struct {
    Py_buffer validity; /* len 0 and buf NULL when the column has no validity bitmap */
    Py_buffer offsets;
    Py_buffer data;     /* len 0 and buf NULL when the column has no data buffer */
    Py_ssize_t offset;  /* the array's offset into its buffers (a slice) */
    int wide;           /* 64-bit offsets (large_binary, large_string) */
    int absent;         /* no column: every row is null (keys of a key-less batch) */
    int have_validity, have_data, have_offsets;
} column_t;

static void
column_release(column_t *column)
{
    if (column->have_validity) {
        PyBuffer_Release(&column->validity);
        column->have_validity = 0;
    }
    if (column->have_offsets) {
        PyBuffer_Release(&column->offsets);
        column->have_offsets = 0;
    }
    if (column->have_data) {
        PyBuffer_Release(&column->data);
        column->have_data = 0;
    }
}

static int
get_optional_buffer(PyObject *obj, Py_buffer *view, int *have)
{
    *have = 0;
    if (obj == Py_None) {
        view->buf = NULL;
        view->len = 0;
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    *have = 1;
    return 0;
}

/* Fill column from (validity, offsets, data, offset, wide); check that the offsets buffer
 * covers length rows. */
static int
column_open(PyObject *spec, Py_ssize_t length, const char *role, column_t *column)
{
    memset(column, 0, sizeof(*column));
    PyObject *validity, *offsets, *data;
    Py_ssize_t offset;
    int wide;
    if (spec == Py_None && strcmp(role, "key") == 0) {
        column->absent = 1;
        return 0;
    }
    if (!PyTuple_Check(spec)
        || !PyArg_ParseTuple(spec, "OOOnp", &validity, &offsets, &data, &offset, &wide)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "the %s column must be (validity, offsets, data, offset, wide)", role);
        }
        return -1;
    }
    column->offset = offset;
    column->wide = wide;
    if (offset < 0) {
        PyErr_Format(PyExc_ValueError, "the %s column's offset is negative", role);
        return -1;
    }
    if (get_optional_buffer(validity, &column->validity, &column->have_validity) < 0
        || get_optional_buffer(data, &column->data, &column->have_data) < 0) {
        column_release(column);
        return -1;
    }
    if (PyObject_GetBuffer(offsets, &column->offsets, PyBUF_SIMPLE) < 0) {
        column_release(column);
        return -1;
    }
    column->have_offsets = 1;
    Py_ssize_t width = wide ? 8 : 4;
    /* offset + length + 1 offsets; neither term can overflow, being sizes of Python objects
     * or checked against one. */
    if (length > PY_SSIZE_T_MAX / 8 - offset - 1
        || column->offsets.len / width < offset + length + 1) {
        PyErr_Format(PyExc_ValueError, "the %s column's offsets buffer is too short", role);
        column_release(column);
        return -1;
    }
    if (column->have_validity && length > 0
        && column->validity.len < (offset + length + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "the %s column's validity bitmap is too short", role);
        column_release(column);
        return -1;
    }
    return 0;
}

static int64_t
column_offset_at(const column_t *column, Py_ssize_t index)
{
    const char *at = (const char *)column->offsets.buf;
    if (column->wide) {
        int64_t value;
        memcpy(&value, at + 8 * index, 8);
        return value;
    }
    int32_t value;
    memcpy(&value, at + 4 * index, 4);
    return value;
}

static PyMethodDef methods[] = {
    {NULL, NULL, 0, NULL},
};

/* ---- BinaryPairs: rows as a sequence of (key, value), encoded natively --------------------- */

static inline int
is_null(const column_t *column, Py_ssize_t row)
{
    if (column->absent) {
        return 1;
    }
    if (!column->have_validity) {
        return 0;
    }
    Py_ssize_t at = column->offset + row;
    const unsigned char *bits = (const unsigned char *)column->validity.buf;
    return !((bits[at >> 3] >> (at & 7)) & 1);
}

/* The bytes of row row of column: its length, -1 for a null (data then points at an empty
 * string), or -2 with ValueError set when its offsets are outside the column's data. */
static int64_t
row_span(const column_t *column, Py_ssize_t row, const char *role, const char **data)
{
    *data = "";
    if (is_null(column, row)) {
        return -1;
    }
    Py_ssize_t at = column->offset + row;
    int64_t first = column_offset_at(column, at);
    int64_t last = column_offset_at(column, at + 1);
    if (first < 0 || last < first || last > (int64_t)column->data.len) {
        PyErr_Format(PyExc_ValueError,
                     "the %s column's offsets for row %zd (%lld to %lld) are outside its data "
                     "(%zd bytes)",
                     role, row, (long long)first, (long long)last, column->data.len);
        return -2;
    }
    if (column->data.buf != NULL) {
        *data = (const char *)column->data.buf + first;
    }
    return last - first;
}


typedef struct {
    PyObject_HEAD
    Py_ssize_t length;
    column_t keys;
    column_t values;
} pairs_t;

/* A row's key and value: 0, or -1 with an exception set. */
static inline int
row_pair(const pairs_t *self, Py_ssize_t row, const char **key, int64_t *key_length,
         const char **value, int64_t *value_length)
{
    *key_length = row_span(&self->keys, row, "key", key);
    if (*key_length == -2) {
        return -1;
    }
    *value_length = row_span(&self->values, row, "value", value);
    return *value_length == -2 ? -1 : 0;
}

static void
pairs_dealloc(pairs_t *self)
{
    column_release(&self->keys);
    column_release(&self->values);
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
pairs_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *length_obj, *key_spec, *value_spec;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "BinaryPairs() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "BinaryPairs", 3, 3, &length_obj, &key_spec, &value_spec)) {
        return NULL;
    }
    Py_ssize_t length = PyLong_AsSsize_t(length_obj);
    if (length == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (length < 0) {
        PyErr_SetString(PyExc_ValueError, "BinaryPairs() takes a length of 0 or more");
        return NULL;
    }
    pairs_t *self = (pairs_t *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->length = length;
    if (column_open(key_spec, length, "key", &self->keys) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (column_open(value_spec, length, "value", &self->values) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    /* Every non-null row's offsets, checked here so that a malformed column is refused
     * before any of its rows is sent. The methods check each row again as they read it: a
     * writable buffer may change while it is held. */
    const column_t *columns[2] = {&self->keys, &self->values};
    const char *roles[2] = {"key", "value"};
    for (int c = 0; c < 2; c++) {
        for (Py_ssize_t row = 0; row < length; row++) {
            const char *data;
            if (row_span(columns[c], row, roles[c], &data) == -2) {
                Py_DECREF(self);
                return NULL;
            }
        }
    }
    return (PyObject *)self;
}



static Py_ssize_t
pairs_len(pairs_t *self)
{
    return self->length;
}

/* A row's key or value as a new reference: bytes, or None for a null. */
static PyObject *
span_object(const char *data, int64_t length)
{
    if (length < 0) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize(data, (Py_ssize_t)length);
}

static PyObject *
pairs_item(pairs_t *self, Py_ssize_t row)
{
    if (row < 0 || row >= self->length) {
        PyErr_SetString(PyExc_IndexError, "BinaryPairs index out of range");
        return NULL;
    }
    const char *key_data, *value_data;
    int64_t key_length, value_length;
    if (row_pair(self, row, &key_data, &key_length, &value_data, &value_length) < 0) {
        return NULL;
    }
    PyObject *key = span_object(key_data, key_length);
    if (key == NULL) {
        return NULL;
    }
    PyObject *value = span_object(value_data, value_length);
    if (value == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, key);
    PyTuple_SET_ITEM(pair, 1, value);
    if (PyObject_GC_IsTracked(pair)) {
        PyObject_GC_UnTrack(pair);
    }
    return pair;
}

/* Java's Utils.murmur2: the partition of a key is (murmur2(key) & 0x7fffffff) % count. */
static int32_t
murmur2(const unsigned char *data, int64_t length)
{
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    int64_t whole = length & ~(int64_t)3;
    for (int64_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | ((uint32_t)data[i + 1] << 8)
                     | ((uint32_t)data[i + 2] << 16) | ((uint32_t)data[i + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *
pairs_murmur2(pairs_t *self, PyObject *arg)
{
    Py_ssize_t row = PyLong_AsSsize_t(arg);
    if (row == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (row < 0 || row >= self->length) {
        PyErr_SetString(PyExc_IndexError, "BinaryPairs index out of range");
        return NULL;
    }
    const char *key;
    int64_t length = row_span(&self->keys, row, "key", &key);
    if (length == -2) {
        return NULL;
    }
    if (length < 0) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLong(murmur2((const unsigned char *)key, length));
}

/* group(start, size, count, partition) -> (groups, largest, taken)
 *
 * The rows start..start+size by partition: {partition: [place, ...]} with places counted
 * from start, in order, each partition's list in the order of its rows. With partition
 * >= 0 every row goes to it; otherwise to murmur2(key) & 0x7fffffff modulo count, and the
 * grouping stops at the first row without a key (taken says how many rows were grouped).
 * largest is the most bytes of key and value together of a grouped row. */
static PyObject *
pairs_group(pairs_t *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "group() takes (start, size, count, partition)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[0]);
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    Py_ssize_t partition = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0 || size < 0 || start > self->length || size > self->length - start) {
        PyErr_SetString(PyExc_IndexError, "group() rows out of range");
        return NULL;
    }
    if (partition < 0 && count <= 0) {
        PyErr_SetString(PyExc_ValueError, "group() needs a partition count of 1 or more");
        return NULL;
    }
    /* Each partition's list of places, found through a small open-addressing table (the
     * chunk has at most ``size`` distinct partitions, and the table is at least twice
     * that), in the order the partitions first appear; the dict is made at the end. */
    Py_ssize_t distinct = partition >= 0 ? 1 : (count < size ? count : size);
    Py_ssize_t capacity = 8;
    while (capacity < 2 * distinct) {
        capacity <<= 1;
    }
    Py_ssize_t *slot_partition = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)capacity);
    PyObject **slot_places = PyMem_Calloc((size_t)capacity, sizeof(PyObject *));
    Py_ssize_t *order = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(distinct > 0 ? distinct : 1));
    Py_ssize_t used = 0;
    PyObject *groups = NULL;
    int64_t largest = 0;
    Py_ssize_t place = 0;
    if (slot_partition == NULL || slot_places == NULL || order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; place < size; place++) {
        Py_ssize_t row = start + place;
        const char *key, *value;
        int64_t key_length, value_length;
        if (row_pair(self, row, &key, &key_length, &value, &value_length) < 0) {
            goto done;
        }
        Py_ssize_t chosen = partition;
        if (chosen < 0) {
            if (key_length < 0) {
                break;
            }
            int32_t hash = murmur2((const unsigned char *)key, key_length);
            chosen = (Py_ssize_t)((uint32_t)hash & 0x7fffffffu) % count;
        }
        int64_t together = (key_length > 0 ? key_length : 0)
                           + (value_length > 0 ? value_length : 0);
        if (together > largest) {
            largest = together;
        }
        Py_ssize_t slot = (Py_ssize_t)((size_t)chosen & (size_t)(capacity - 1));
        while (slot_places[slot] != NULL && slot_partition[slot] != chosen) {
            slot = (slot + 1) & (capacity - 1);
        }
        if (slot_places[slot] == NULL) {
            if (used >= distinct) {
                PyErr_SetString(PyExc_SystemError, "group() found more partitions than rows");
                goto done;
            }
            PyObject *places = PyList_New(0);
            if (places == NULL) {
                goto done;
            }
            /* Ints only: out of the cyclic GC, which need never walk it. */
            PyObject_GC_UnTrack(places);
            slot_places[slot] = places;
            slot_partition[slot] = chosen;
            order[used++] = slot;
        }
        PyObject *at = PyLong_FromSsize_t(place);
        if (at == NULL) {
            goto done;
        }
        int failed = PyList_Append(slot_places[slot], at);
        Py_DECREF(at);
        if (failed < 0) {
            goto done;
        }
    }
    groups = PyDict_New();
    if (groups == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < used; i++) {
        PyObject *number = PyLong_FromSsize_t(slot_partition[order[i]]);
        if (number == NULL || PyDict_SetItem(groups, number, slot_places[order[i]]) < 0) {
            Py_XDECREF(number);
            Py_CLEAR(groups);
            goto done;
        }
        Py_DECREF(number);
    }
done:
    if (slot_places != NULL) {
        for (Py_ssize_t i = 0; i < used; i++) {
            Py_DECREF(slot_places[order[i]]); /* the dict holds those it has */
        }
    }
    PyMem_Free(slot_partition);
    PyMem_Free(slot_places);
    PyMem_Free(order);
    if (groups == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NLn)", groups, (long long)largest, place);
}

static inline Py_ssize_t
varint_size(uint64_t zigzag)
{
    Py_ssize_t size = 1;
    while (zigzag >= 0x80) {
        zigzag >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t
zigzag(int64_t value)
{
    return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
}

static inline char *
put_varint(char *at, uint64_t zigzag)
{
    while (zigzag >= 0x80) {
        *at++ = (char)((zigzag & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    *at++ = (char)zigzag;
    return at;
}

/* The row of place index i of places, from base: checked against the length. */
static int
place_row(pairs_t *self, PyObject *places, Py_ssize_t base, Py_ssize_t i, Py_ssize_t *row)
{
    Py_ssize_t place = places == Py_None ? i : PyLong_AsSsize_t(PyList_GET_ITEM(places, i));
    if (place == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (place < 0 || place > self->length - base) {
        PyErr_SetString(PyExc_IndexError, "a place outside the rows");
        return -1;
    }
    *row = base + place;
    if (*row >= self->length) {
        PyErr_SetString(PyExc_IndexError, "a place outside the rows");
        return -1;
    }
    return 0;
}

/* The body size of a record (all but its length's varint) after head_size bytes of head,
 * at offset delta delta. */
static inline int64_t
body_size(Py_ssize_t head_size, int64_t delta, int64_t key_length, int64_t value_length)
{
    return head_size + varint_size(zigzag(delta)) + varint_size(zigzag(key_length))
           + (key_length > 0 ? key_length : 0) + varint_size(zigzag(value_length))
           + (value_length > 0 ? value_length : 0) + 1;
}

static int
check_places(PyObject *places, Py_ssize_t start, Py_ssize_t stop)
{
    if (places != Py_None && !PyList_Check(places)) {
        PyErr_SetString(PyExc_TypeError, "places must be a list or None");
        return -1;
    }
    if (start < 0 || stop < start || (places != Py_None && stop > PyList_GET_SIZE(places))) {
        PyErr_SetString(PyExc_IndexError, "start and stop outside places");
        return -1;
    }
    return 0;
}

/* encode(head, count, base, places, start, stop, room, write[, sizes])
 *     -> (records, stopped, used)
 *
 * The records of the rows base + places[i] (base + i when places is None), i from start
 * on, as a record batch v2 holds
 * them: each one's length, then head (its attributes and timestamp delta, shared by the
 * run), its offset delta (count for the first, then one more each), key, value and no
 * headers. As many as fit in room bytes, up to stop: stopped is the i it stopped at and
 * used their bytes; records is None when write is false (only counting). With sizes (a
 * bytearray) and write, the key and value sizes of each record written (-1 for a null)
 * are appended to it as two native int32, as the record has them (on an error it is left
 * as it was). */
static PyObject *
pairs_encode(pairs_t *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "encode() takes (head, count, base, places, start, stop, room, write"
                        "[, sizes])");
        return NULL;
    }
    PyObject *sizes = nargs == 9 ? args[8] : Py_None;
    if (sizes != Py_None && !PyByteArray_Check(sizes)) {
        PyErr_SetString(PyExc_TypeError, "encode(): sizes must be a bytearray or None");
        return NULL;
    }
    PyObject *head = args[0];
    PyObject *places = args[3];
    if (!PyBytes_Check(head)) {
        PyErr_SetString(PyExc_TypeError, "head must be bytes");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    Py_ssize_t base = PyLong_AsSsize_t(args[2]);
    Py_ssize_t start = PyLong_AsSsize_t(args[4]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[5]);
    Py_ssize_t room = PyLong_AsSsize_t(args[6]);
    int write = PyObject_IsTrue(args[7]);
    if (PyErr_Occurred() || write < 0) {
        return NULL;
    }
    if (count < 0 || base < 0 || base > self->length) {
        PyErr_SetString(PyExc_ValueError, "encode() takes a count and base of 0 or more");
        return NULL;
    }
    if (check_places(places, start, stop) < 0) {
        return NULL;
    }
    Py_ssize_t head_size = PyBytes_GET_SIZE(head);
    int64_t used = 0;
    Py_ssize_t i = start;
    for (; i < stop; i++) {
        Py_ssize_t row;
        if (place_row(self, places, base, i, &row) < 0) {
            return NULL;
        }
        const char *key, *value;
        int64_t key_length, value_length;
        if (row_pair(self, row, &key, &key_length, &value, &value_length) < 0) {
            return NULL;
        }
        int64_t body = body_size(head_size, (int64_t)count + (i - start), key_length,
                                 value_length);
        int64_t size = varint_size(zigzag(body)) + body;
        if (used + size > room) {
            break;
        }
        used += size;
    }
    Py_ssize_t stopped = i;
    if (!write) {
        return Py_BuildValue("(OnL)", Py_None, stopped, (long long)used);
    }
    PyObject *records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)used);
    if (records == NULL) {
        return NULL;
    }
    char *sized = NULL;
    Py_ssize_t had = 0;
    if (sizes != Py_None) {
        had = PyByteArray_GET_SIZE(sizes);
        if (PyByteArray_Resize(sizes, had + (stopped - start) * (Py_ssize_t)(2 * sizeof(int32_t)))
            < 0) {
            Py_DECREF(records);
            return NULL;
        }
        sized = PyByteArray_AS_STRING(sizes) + had;
    }
    char *at = PyBytes_AS_STRING(records);
    char *end = at + used;
    const char *head_bytes = PyBytes_AS_STRING(head);
    for (i = start; i < stopped; i++) {
        /* Each row read and checked again: nothing the first pass read is trusted, so a
         * buffer (or places) changed in between cannot make this write out of bounds. */
        Py_ssize_t row;
        const char *key, *value;
        int64_t key_length, value_length;
        if (place_row(self, places, base, i, &row) < 0
            || row_pair(self, row, &key, &key_length, &value, &value_length) < 0) {
            Py_DECREF(records);
            if (sized != NULL) {
                PyByteArray_Resize(sizes, had); /* shrinking back: cannot fail */
            }
            return NULL;
        }
        int64_t delta = (int64_t)count + (i - start);
        int64_t body = body_size(head_size, delta, key_length, value_length);
        if (varint_size(zigzag(body)) + body > end - at) {
            Py_DECREF(records);
            if (sized != NULL) {
                PyByteArray_Resize(sizes, had); /* shrinking back: cannot fail */
            }
            PyErr_SetString(PyExc_ValueError, "encode(): the rows changed while being encoded");
            return NULL;
        }
        at = put_varint(at, zigzag(body));
        memcpy(at, head_bytes, (size_t)head_size);
        at += head_size;
        at = put_varint(at, zigzag(delta));
        at = put_varint(at, zigzag(key_length));
        if (key_length > 0) {
            memcpy(at, key, (size_t)key_length);
            at += key_length;
        }
        at = put_varint(at, zigzag(value_length));
        if (value_length > 0) {
            memcpy(at, value, (size_t)value_length);
            at += value_length;
        }
        *at++ = 0; /* no headers */
        if (sized != NULL) {
            int32_t packed[2] = {(int32_t)key_length, (int32_t)value_length};
            memcpy(sized, packed, sizeof(packed));
            sized += sizeof(packed);
        }
    }
    if (at != end) {
        Py_DECREF(records);
        if (sized != NULL) {
            PyByteArray_Resize(sizes, had); /* shrinking back: cannot fail */
        }
        PyErr_SetString(PyExc_SystemError, "encode(): the records and their size disagree");
        return NULL;
    }
    return Py_BuildValue("(NnL)", records, stopped, (long long)used);
}

/* value_bytes(start, stop): the bytes of the values of rows start:stop together (a null
 * counts 0). */
static PyObject *
pairs_value_bytes(pairs_t *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "value_bytes() takes (start, stop)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[0]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0 || stop < start || stop > self->length) {
        PyErr_SetString(PyExc_IndexError, "value_bytes() rows out of range");
        return NULL;
    }
    int64_t total = 0;
    for (Py_ssize_t row = start; row < stop; row++) {
        const char *value;
        int64_t length = row_span(&self->values, row, "value", &value);
        if (length == -2) {
            return NULL;
        }
        total += length > 0 ? length : 0;
    }
    return PyLong_FromLongLong(total);
}

static PyObject *
pairs_keyless(pairs_t *self, PyObject *unused)
{
    return PyBool_FromLong(self->keys.absent);
}

static PyMethodDef pairs_methods[] = {
    {"keyless", (PyCFunction)pairs_keyless, METH_NOARGS,
     "keyless() -> whether the rows have no key column (made with keys None): every key "
     "null."},
    {"value_bytes", (PyCFunction)(void (*)(void))pairs_value_bytes, METH_FASTCALL,
     "value_bytes(start, stop) -> the bytes of the values of rows start:stop together."},
    {"murmur2", (PyCFunction)pairs_murmur2, METH_O,
     "murmur2(row) -> the Java client's murmur2 of the row's key (a signed 32-bit int), or "
     "None for a null key."},
    {"group", (PyCFunction)(void (*)(void))pairs_group, METH_FASTCALL,
     "group(start, size, count, partition) -> (groups, largest, taken): rows by partition "
     "(see arrowcols.c)."},
    {"encode", (PyCFunction)(void (*)(void))pairs_encode, METH_FASTCALL,
     "encode(head, count, base, places, start, stop, room, write[, sizes]) -> (records, "
     "stopped, used): rows as a record batch's records (see arrowcols.c)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot pairs_slots[] = {
    {Py_tp_dealloc, pairs_dealloc},
    {Py_tp_new, pairs_new},
    {Py_tp_methods, pairs_methods},
    {Py_sq_length, pairs_len},
    {Py_sq_item, pairs_item},
    {Py_tp_doc,
     "BinaryPairs(length, keys, values): the rows of two Arrow binary columns as a sequence "
     "of (key, value) tuples (None for a null), and the send_many path that encodes them as "
     "records without a Python object per row. Each column is (validity, offsets, data, "
     "offset, wide): its validity bitmap and data buffers (either may be None), its "
     "offsets buffer, the array's offset into them and whether its offsets are 64-bit; "
     "keys may be None (no key column: every key null). The buffers are held until the "
     "object goes."},
    {0, NULL},
};

static PyType_Spec pairs_spec = {
    "aioproducer._native.arrowcols.BinaryPairs",
    sizeof(pairs_t),
    0,
    Py_TPFLAGS_DEFAULT,
    pairs_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "aioproducer._native.arrowcols",
    "(key, value) pairs from the buffers of Arrow binary columns (see arrowcols.c).",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit_arrowcols(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    PyObject *type = PyType_FromSpec(&pairs_spec);
    if (type == NULL || PyModule_AddObject(module, "BinaryPairs", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* Free-threaded Python: a BinaryPairs does not change once made; its methods read the
     * buffers it holds views of and fill objects they just made. */
    if (PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}
