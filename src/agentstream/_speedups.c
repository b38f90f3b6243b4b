/* The per-event steps of agentstream's hot paths that the interpreter makes slow, in C.
 *
 * Optional: every function here has a pure-Python twin that gives the same answer (the module that
 * uses it says which), and tests/test_speedups.py holds the two to each other. Nothing here decides
 * alone what is malformed: a False only sends the caller down its careful path, which words the error.
 *
 * Event fields are read through the slots msgspec gives each Struct field (a member descriptor with
 * an offset), found once per type and kept, as attribute lookups would cost more than the checks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#ifdef Py_T_OBJECT_EX
#define OBJECT_SLOT Py_T_OBJECT_EX
#else
#define OBJECT_SLOT T_OBJECT_EX
#endif

/* ---- fields of msgspec Structs, by offset ------------------------------------------------------ */

enum { F_V, F_SESSION_ID, F_SEQ, F_TS, F_MESSAGE_ID, F_REASONING_ID, N_FIELDS };
static const char *field_names[N_FIELDS] = {"v", "session_id", "seq", "ts", "message_id", "reasoning_id"};
static PyObject *field_keys[N_FIELDS];

#define CACHED_TYPES 32
typedef struct {
    PyTypeObject *type; /* a strong reference: a freed type's address cannot come back with other slots */
    Py_ssize_t offsets[N_FIELDS]; /* -1: not a plain object slot, ask getattr */
} TypeSlots;
static TypeSlots cached[CACHED_TYPES];
static int cached_count;

static TypeSlots *slots_of(PyTypeObject *type) {
    static TypeSlots *last; /* runs of events of one type are common: one comparison for them */
    if (last != NULL && last->type == type) return last;
    for (int i = 0; i < cached_count; i++) {
        if (cached[i].type == type) return last = &cached[i];
    }
    if (cached_count == CACHED_TYPES) return NULL;
    TypeSlots *entry = &cached[cached_count];
    for (int f = 0; f < N_FIELDS; f++) {
        /* On the class, a slot's attribute is its member descriptor itself. */
        PyObject *descr = PyObject_GetAttr((PyObject *)type, field_keys[f]);
        entry->offsets[f] = -1;
        if (descr == NULL) {
            PyErr_Clear();
            continue;
        }
        /* a slot of this type's instances (not, say, of its metaclass's) */
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(descr))) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == OBJECT_SLOT) entry->offsets[f] = member->offset;
        }
        Py_DECREF(descr);
    }
    Py_INCREF(type);
    entry->type = type;
    cached_count++;
    return last = entry;
}

/* A new reference to the field, or NULL with an exception set (AttributeError for an unset slot).
 * ``slots`` is slots_of(Py_TYPE(obj)), looked up once for the several fields of one object. */
static PyObject *slot_field(PyObject *obj, TypeSlots *slots, int f) {
    if (slots != NULL && slots->offsets[f] >= 0) {
        PyObject *value = *(PyObject **)((char *)obj + slots->offsets[f]);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, field_keys[f]);
}

static PyObject *field(PyObject *obj, int f) { return slot_field(obj, slots_of(Py_TYPE(obj)), f); }

/* ---- line framing ------------------------------------------------------------------------------ */

PyDoc_STRVAR(count_lines_doc, "count_lines(data) -> int\n\nHow many b'\\n' a bytes-like object holds.");

static PyObject *count_lines(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *at = view.buf, *end = at + view.len;
    Py_ssize_t count = 0;
    while (at < end && (at = memchr(at, '\n', (size_t)(end - at))) != NULL) {
        count++;
        at++;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

static inline int is_blank_byte(char c) { return c == ' ' || c == '\t' || c == '\r'; }

PyDoc_STRVAR(has_blank_line_doc,
             "has_blank_line(data) -> bool\n\n"
             "Whether a line of data (its first included) is empty or only spaces, tabs and CRs before its "
             "newline.");

static PyObject *has_blank_line(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *start = view.buf, *end = start + view.len;
    int blank = 0;
    const char *line = start;
    while (line < end) {
        const char *at = line;
        while (at < end && is_blank_byte(*at)) at++;
        if (at < end && *at == '\n') {
            blank = 1;
            break;
        }
        const char *newline = memchr(at, '\n', (size_t)(end - at));
        if (newline == NULL) break;
        line = newline + 1;
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(blank);
}

/* ---- timestamps -------------------------------------------------------------------------------- */

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }
static inline int two(const char *s, char high_max, char low_max_at_high) {
    /* Two digits; the first at most high_max, and when it equals high_max the second at most
     * low_max_at_high. */
    if (!is_digit(s[0]) || !is_digit(s[1]) || s[0] > high_max) return 0;
    return s[0] < high_max || s[1] <= low_max_at_high;
}

/* RFC 3339 date-time exactly as protocol._TIMESTAMP matches it (fullmatch, ASCII digits). */
static int timestamp_text(const char *s, Py_ssize_t n) {
    if (n < 20) return 0;
    for (int i = 0; i < 4; i++)
        if (!is_digit(s[i])) return 0;
    if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') return 0;
    /* month 01-12 */
    if (!is_digit(s[5]) || !is_digit(s[6])) return 0;
    if (s[5] == '0' ? s[6] == '0' : !(s[5] == '1' && s[6] <= '2')) return 0;
    /* day 01-31 */
    if (!is_digit(s[8]) || !is_digit(s[9]) || s[8] > '3') return 0;
    if ((s[8] == '0' && s[9] == '0') || (s[8] == '3' && s[9] > '1')) return 0;
    /* hour 00-23, minute 00-59, second 00-60 */
    if (!two(s + 11, '2', '3')) return 0;
    if (!is_digit(s[14]) || !is_digit(s[15]) || s[14] > '5') return 0;
    if (!is_digit(s[17]) || !is_digit(s[18])) return 0;
    if (s[17] > '6' || (s[17] == '6' && s[18] != '0')) return 0;
    Py_ssize_t at = 19;
    if (s[at] == '.') {
        Py_ssize_t digits = 0;
        at++;
        while (at < n && is_digit(s[at]) && digits < 10) {
            at++;
            digits++;
        }
        if (digits < 1 || digits > 9) return 0;
    }
    if (at >= n) return 0;
    if (s[at] == 'Z' || s[at] == 'z') return at + 1 == n;
    if (s[at] != '+' && s[at] != '-') return 0;
    if (n - at != 6) return 0;
    return two(s + at + 1, '2', '3') && s[at + 3] == ':' && is_digit(s[at + 4]) && s[at + 4] <= '5' &&
           is_digit(s[at + 5]);
}

static int is_timestamp(PyObject *value) {
    if (!PyUnicode_Check(value) || !PyUnicode_IS_ASCII(value)) return 0; /* the pattern is ASCII only */
    return timestamp_text((const char *)PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value));
}

PyDoc_STRVAR(is_timestamp_doc, "is_timestamp(value) -> bool\n\nprotocol.is_timestamp, in C.");

static PyObject *py_is_timestamp(PyObject *self, PyObject *value) {
    return PyBool_FromLong(is_timestamp(value));
}

PyDoc_STRVAR(events_timestamped_doc,
             "events_timestamped(events) -> bool\n\nWhether every event's ts is a timestamp.");

static PyObject *events_timestamped(PyObject *self, PyObject *events) {
    if (!PyList_Check(events)) {
        PyErr_SetString(PyExc_TypeError, "events must be a list");
        return NULL;
    }
    PyObject *last_good = NULL; /* events of one clock reading share their ts object: checked once */
    int good = 1;
    for (Py_ssize_t i = 0; good && i < PyList_GET_SIZE(events); i++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, i)); /* a getattr may run Python */
        PyObject *ts = field(event, F_TS);
        Py_DECREF(event);
        if (ts == NULL) {
            Py_XDECREF(last_good);
            return NULL;
        }
        good = ts == last_good || is_timestamp(ts);
        Py_XSETREF(last_good, ts);
    }
    Py_XDECREF(last_good);
    return PyBool_FromLong(good);
}

/* ---- validate ---------------------------------------------------------------------------------- */

/* 1 when event carries seq `seq`, this version and session and a timestamp; 0 when not; -1 on an error.
 * `last_ts` holds the ts of the event before (a new reference, replaced here). */
static int stamped(PyObject *event, long long seq, long long version, PyObject *session_id, PyObject **last_ts) {
    TypeSlots *slots = slots_of(Py_TYPE(event));
    static const int which[4] = {F_SEQ, F_V, F_SESSION_ID, F_TS};
    PyObject *values[4] = {NULL, NULL, NULL, NULL};
    int outcome = -1;
    for (int k = 0; k < 4; k++) {
        if ((values[k] = slot_field(event, slots, which[k])) == NULL) goto done;
    }
    int overflow_seq = 0, overflow_v = 0;
    outcome = PyLong_CheckExact(values[0]) && PyLong_CheckExact(values[1]) &&
              PyLong_AsLongLongAndOverflow(values[0], &overflow_seq) == seq && !overflow_seq &&
              PyLong_AsLongLongAndOverflow(values[1], &overflow_v) == version && !overflow_v;
    if (outcome) outcome = PyObject_RichCompareBool(values[2], session_id, Py_EQ);
    if (outcome > 0) {
        outcome = values[3] == *last_ts || is_timestamp(values[3]);
        Py_XSETREF(*last_ts, Py_NewRef(values[3]));
    }
done:
    for (int k = 0; k < 4; k++) Py_XDECREF(values[k]);
    return outcome;
}

PyDoc_STRVAR(stamps_in_order_doc,
             "stamps_in_order(events, next_seq, session_id, version) -> bool\n\n"
             "Whether events carry seq next_seq, next_seq + 1, ..., this session_id and version, and a "
             "timestamp each. False also where numbers pass 64 bits: the caller's careful path decides.");

static PyObject *stamps_in_order(PyObject *self, PyObject *args) {
    PyObject *events, *session_id, *next_seq_obj, *version_obj;
    if (!PyArg_ParseTuple(args, "O!O!OO!", &PyList_Type, &events, &PyLong_Type, &next_seq_obj, &session_id,
                          &PyLong_Type, &version_obj))
        return NULL;
    int overflow_seq = 0, overflow_v = 0;
    long long next_seq = PyLong_AsLongLongAndOverflow(next_seq_obj, &overflow_seq);
    long long version = PyLong_AsLongLongAndOverflow(version_obj, &overflow_v);
    if (overflow_seq || overflow_v || next_seq > LLONG_MAX - PyList_GET_SIZE(events)) Py_RETURN_FALSE;
    PyObject *last_ts = NULL;
    int good = 1;
    for (Py_ssize_t i = 0; good > 0 && i < PyList_GET_SIZE(events); i++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, i)); /* a getattr may run Python */
        good = stamped(event, next_seq + i, version, session_id, &last_ts);
        Py_DECREF(event);
    }
    Py_XDECREF(last_ts);
    return good < 0 ? NULL : PyBool_FromLong(good);
}

static PyObject *result_key, *pending_key; /* the Validator attributes that say a turn has ended */

/* One event of Validator._feed_turn's loop: 1 when it ended the turn (a result, a fatal error), 0 when
 * the loop goes on, -1 on an error. */
static int turn_event(PyObject *validator, PyObject *event, Py_ssize_t line, PyObject *open_messages,
                      PyObject *open_reasoning, PyObject *message_delta, PyObject *reasoning_delta,
                      PyObject *checks) {
    PyObject *kind = (PyObject *)Py_TYPE(event);
    PyObject *open = kind == message_delta ? open_messages : kind == reasoning_delta ? open_reasoning : NULL;
    if (open != NULL) { /* a delta that continues an open run needs nothing more */
        PyObject *id = field(event, open == open_messages ? F_MESSAGE_ID : F_REASONING_ID);
        if (id == NULL) return -1;
        int continues = PyDict_Contains(open, id);
        Py_DECREF(id);
        if (continues) return continues < 0 ? -1 : 0;
    }
    PyObject *check = PyDict_GetItemWithError(checks, kind);
    if (check == NULL) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(check); /* the check may change the table */
    PyObject *number = PyLong_FromSsize_t(line);
    PyObject *done = number == NULL ? NULL : PyObject_CallFunctionObjArgs(check, validator, event, number, NULL);
    Py_XDECREF(number);
    Py_DECREF(check);
    if (done == NULL) return -1;
    Py_DECREF(done);
    PyObject *result = PyObject_GetAttr(validator, result_key);
    if (result == NULL) return -1;
    int ended = result != Py_None;
    Py_DECREF(result);
    if (ended) return 1;
    PyObject *pending = PyObject_GetAttr(validator, pending_key);
    if (pending == NULL) return -1;
    ended = PyObject_IsTrue(pending);
    Py_DECREF(pending);
    return ended;
}

PyDoc_STRVAR(feed_turn_doc,
             "feed_turn(validator, events, start, first_line, open_messages, open_reasoning, message_delta, "
             "reasoning_delta, checks) -> int\n\n"
             "Validator._feed_turn's loop: the index after the last event it took.");

static PyObject *feed_turn(PyObject *self, PyObject *args) {
    PyObject *validator, *events, *open_messages, *open_reasoning, *checks;
    PyTypeObject *message_delta, *reasoning_delta;
    Py_ssize_t start, first_line;
    if (!PyArg_ParseTuple(args, "OO!nnO!O!O!O!O!", &validator, &PyList_Type, &events, &start, &first_line,
                          &PyDict_Type, &open_messages, &PyDict_Type, &open_reasoning, &PyType_Type,
                          &message_delta, &PyType_Type, &reasoning_delta, &PyDict_Type, &checks))
        return NULL;
    for (Py_ssize_t index = start; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, index)); /* a getattr or a check may run Python */
        int ended = turn_event(validator, event, first_line + index, open_messages, open_reasoning,
                               (PyObject *)message_delta, (PyObject *)reasoning_delta, checks);
        Py_DECREF(event);
        if (ended < 0) return NULL;
        if (ended) return PyLong_FromSsize_t(index + 1);
    }
    return PyLong_FromSsize_t(PyList_GET_SIZE(events));
}

/* ---- module ------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"count_lines", count_lines, METH_O, count_lines_doc},
    {"has_blank_line", has_blank_line, METH_O, has_blank_line_doc},
    {"is_timestamp", py_is_timestamp, METH_O, is_timestamp_doc},
    {"events_timestamped", events_timestamped, METH_O, events_timestamped_doc},
    {"stamps_in_order", stamps_in_order, METH_VARARGS, stamps_in_order_doc},
    {"feed_turn", feed_turn, METH_VARARGS, feed_turn_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "agentstream._speedups",
    .m_doc = "Per-event steps of the hot paths in C; each has a pure-Python twin (see the module's source).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    for (int f = 0; f < N_FIELDS; f++) {
        field_keys[f] = PyUnicode_InternFromString(field_names[f]);
        if (field_keys[f] == NULL) return NULL;
    }
    result_key = PyUnicode_InternFromString("result");
    pending_key = PyUnicode_InternFromString("_pending_fatal");
    if (result_key == NULL || pending_key == NULL) return NULL;
    PyObject *created = PyModule_Create(&module);
    /* Bumped with every change of a function's arguments or meaning: _accel.py uses a build of this file
     * only if it says the number it expects (an editable install keeps an old build until rebuilt). */
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE", 1) < 0) Py_CLEAR(created);
    return created;
}
