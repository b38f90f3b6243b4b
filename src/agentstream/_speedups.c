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
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifdef Py_T_OBJECT_EX
#define OBJECT_SLOT Py_T_OBJECT_EX
#else
#define OBJECT_SLOT T_OBJECT_EX
#endif

/* ---- fields of msgspec Structs, by offset ------------------------------------------------------ */

enum {
    F_V, F_SESSION_ID, F_SEQ, F_TS, F_MESSAGE_ID, F_REASONING_ID, F_CALL_ID, F_CONTENT, F_NAME, F_ROLE,
    F_ITEM, F_ID, F_COMMAND, F_AGGREGATED_OUTPUT, F_STATUS, F_EXIT_CODE, F_TEXT, /* Codex's */
    F_TOOL_NAME, F_TOOL_ID, F_PARAMETERS, F_OUTPUT, F_ERROR, F_TIMESTAMP,         /* Gemini's */
    F_NEXT_SEQ, N_FIELDS                                                          /* a Sequencer's */
};
static const char *field_names[N_FIELDS] = {
    "v",    "session_id", "seq",     "ts",      "message_id",        "reasoning_id", "call_id",  "content",
    "name", "role",       "item",    "id",      "command",           "aggregated_output", "status", "exit_code", "text",
    "tool_name", "tool_id", "parameters", "output", "error", "timestamp",
    "next_seq"};
static PyObject *field_keys[N_FIELDS];

#define CACHED_TYPES 32
typedef struct {
    PyTypeObject *type; /* a strong reference: a freed type's address cannot come back with other slots */
    Py_ssize_t offsets[N_FIELDS]; /* -1: not a plain object slot, ask getattr */
} TypeSlots;
static TypeSlots cached[CACHED_TYPES];
static int cached_count;
#define TYPE_BUCKETS 64 /* twice CACHED_TYPES, a power of two: a type is mostly found at its first bucket */
static TypeSlots *by_type[TYPE_BUCKETS];

/* Where instances of `type` keep attribute `name` when it is a plain object slot (a msgspec field, a name in
 * __slots__), or -1. */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    /* On the class, a slot's attribute is its member descriptor itself. */
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t offset = -1;
    /* a slot of this type's instances (not, say, of its metaclass's) */
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(descr))) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == OBJECT_SLOT) offset = member->offset;
    }
    Py_DECREF(descr);
    return offset;
}

/* The slots of `type`, found once (NULL when there is no room left: every field is then asked of getattr).
 * Kept in a table by the type's address (Fibonacci hashing), as events of many types alternate. */
static TypeSlots *find_slots(PyTypeObject *type) {
    size_t bucket = (size_t)(((uint64_t)(uintptr_t)type * 0x9E3779B97F4A7C15u) >> 58); /* 6 bits: 64 buckets */
    for (; by_type[bucket] != NULL; bucket = (bucket + 1) % TYPE_BUCKETS) {
        if (by_type[bucket]->type == type) return by_type[bucket];
    }
    if (cached_count == CACHED_TYPES) return NULL;
    TypeSlots *entry = &cached[cached_count];
    for (int f = 0; f < N_FIELDS; f++) entry->offsets[f] = slot_offset(type, field_keys[f]);
    Py_INCREF(type);
    entry->type = type;
    cached_count++;
    return by_type[bucket] = entry;
}

static TypeSlots *slots_of(PyTypeObject *type) {
    static TypeSlots *last; /* runs of events of one type are common: one comparison for them */
    return last != NULL && last->type == type ? last : (last = find_slots(type));
}

/* slots_of for a Sequencer, beside the events it stamps (so that neither evicts the other). */
static TypeSlots *sequencer_slots(PyTypeObject *type) {
    static TypeSlots *last;
    return last != NULL && last->type == type ? last : (last = find_slots(type));
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

/* Set a field (a new reference to value is taken); 0, or -1 with an exception set. */
static int set_slot_field(PyObject *obj, TypeSlots *slots, int f, PyObject *value) {
    if (slots != NULL && slots->offsets[f] >= 0) {
        PyObject **at = (PyObject **)((char *)obj + slots->offsets[f]);
        Py_XSETREF(*at, Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(obj, field_keys[f], value);
}

/* A Sequencer's session_id or next_seq (a new reference), and setting one: as slot_field and set_slot_field. */
static PyObject *sequencer_field(PyObject *sequencer, int f) {
    return slot_field(sequencer, sequencer_slots(Py_TYPE(sequencer)), f);
}

static int set_sequencer_field(PyObject *sequencer, int f, PyObject *value) {
    return set_slot_field(sequencer, sequencer_slots(Py_TYPE(sequencer)), f, value);
}

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

PyDoc_STRVAR(split_lines_doc,
             "split_lines(data, start) -> list[bytes]\n\n"
             "data[start:].split(b'\\n') for a bytes-like object, each piece a new bytes object. memchr finds "
             "each newline, where bytes.split tests the bytes one at a time, and data[start:] is not copied.");

static PyObject *split_lines(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "split_lines(data, start)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *lines = NULL;
    if (start < 0 || start > view.len) {
        PyErr_SetString(PyExc_ValueError, "split_lines: start is outside the data");
        goto done;
    }
    if ((lines = PyList_New(0)) == NULL) goto done;
    const char *at = (const char *)view.buf + start, *end = (const char *)view.buf + view.len;
    for (;;) {
        const char *newline = memchr(at, '\n', (size_t)(end - at));
        PyObject *line = PyBytes_FromStringAndSize(at, (newline != NULL ? newline : end) - at);
        if (line == NULL || PyList_Append(lines, line) < 0) {
            Py_XDECREF(line);
            Py_CLEAR(lines);
            goto done;
        }
        Py_DECREF(line);
        if (newline == NULL) break;
        at = newline + 1;
    }
done:
    PyBuffer_Release(&view);
    return lines;
}

/* ---- timestamps -------------------------------------------------------------------------------- */

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }
static inline int two(const char *s, char high_max, char low_max_at_high) {
    /* Two digits; the first at most high_max, and when it equals high_max the second at most
     * low_max_at_high. */
    if (!is_digit(s[0]) || !is_digit(s[1]) || s[0] > high_max) return 0;
    return s[0] < high_max || s[1] <= low_max_at_high;
}

/* The date and time of an RFC 3339 date-time, its first 19 characters (the caller knows there are 20 or more). */
static int timestamp_head(const char *s) {
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
    return !(s[17] > '6' || (s[17] == '6' && s[18] != '0'));
}

/* What follows the head: a fraction of a second, then the zone. */
static int timestamp_tail(const char *s, Py_ssize_t n) {
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

/* RFC 3339 date-time exactly as protocol._TIMESTAMP matches it (fullmatch, ASCII digits). */
static int timestamp_text(const char *s, Py_ssize_t n) { return n >= 20 && timestamp_head(s) && timestamp_tail(s, n); }

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

/* ---- the clock ---------------------------------------------------------------------------------- */

static long long clock_second = -1, clock_milli = -1;
static char clock_prefix[64];
static PyObject *clock_text; /* the last reading's text: one object per millisecond, as in Python */

PyDoc_STRVAR(now_ts_doc, "now_ts() -> str\n\nprotocol.now_ts, in C: RFC 3339 UTC with milliseconds.");

static PyObject *now_ts(PyObject *self, PyObject *unused) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    long long milli = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (milli != clock_milli || clock_text == NULL) {
        long long second = milli / 1000;
        if (second != clock_second) {
            time_t at = (time_t)second;
            struct tm parts;
            if (gmtime_r(&at, &parts) == NULL ||
                strftime(clock_prefix, sizeof clock_prefix, "%Y-%m-%dT%H:%M:%S", &parts) == 0)
                return PyErr_Format(PyExc_OverflowError, "the clock reads %lld s, which has no date", second);
            clock_second = second;
        }
        PyObject *text = PyUnicode_FromFormat("%s.%03dZ", clock_prefix, (int)(milli % 1000));
        if (text == NULL) return NULL;
        Py_XSETREF(clock_text, text);
        clock_milli = milli;
    }
    return Py_NewRef(clock_text);
}

/* ---- validate ---------------------------------------------------------------------------------- */

/* Whether a and b are str of the same text, told without a call (0 also for what needs one: a subclass). */
static inline int same_text(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (!PyUnicode_CheckExact(a) || !PyUnicode_CheckExact(b)) return 0;
    Py_ssize_t length = PyUnicode_GET_LENGTH(a);
    return length == PyUnicode_GET_LENGTH(b) && PyUnicode_KIND(a) == PyUnicode_KIND(b) &&
           memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), length * PyUnicode_KIND(a)) == 0;
}

/* is_timestamp(value), where `valid` is NULL or a timestamp: one that shares its date and time (a stream's
 * times mostly do) needs only its tail read. */
static int timestamp_after(PyObject *value, PyObject *valid) {
    if (valid == NULL || !PyUnicode_Check(value) || !PyUnicode_IS_ASCII(value) || PyUnicode_GET_LENGTH(value) < 20)
        return is_timestamp(value);
    const char *text = (const char *)PyUnicode_1BYTE_DATA(value);
    if (memcmp(text, PyUnicode_1BYTE_DATA(valid), 19) != 0) return is_timestamp(value);
    return timestamp_tail(text, PyUnicode_GET_LENGTH(value));
}

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
    if (outcome) outcome = same_text(values[2], session_id) || PyObject_RichCompareBool(values[2], session_id, Py_EQ);
    if (outcome > 0) {
        outcome = values[3] == *last_ts || timestamp_after(values[3], *last_ts);
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
static PyObject *limit_key;               /* RecentIds.limit */

/* A RecentIds (a dict subclass) and its limit, read when first needed. */
typedef struct {
    PyObject *ids;
    Py_ssize_t limit;
    int limit_known;
} Recent;

/* RecentIds.add: 0, or -1 with an exception set. */
static int recent_add(Recent *recent, PyObject *key) {
    if (PyDict_SetItem(recent->ids, key, Py_None) < 0) return -1;
    if (!recent->limit_known) {
        PyObject *limit = PyObject_GetAttr(recent->ids, limit_key);
        if (limit == NULL) return -1;
        recent->limit = PyLong_AsSsize_t(limit);
        Py_DECREF(limit);
        if (recent->limit == -1 && PyErr_Occurred()) return -1;
        recent->limit_known = 1;
    }
    if (PyDict_GET_SIZE(recent->ids) <= recent->limit) return 0;
    Py_ssize_t position = 0;
    PyObject *oldest;
    if (!PyDict_Next(recent->ids, &position, &oldest, NULL)) return 0;
    Py_INCREF(oldest);
    int done = PyDict_DelItem(recent->ids, oldest);
    Py_DECREF(oldest);
    return done;
}

/* The kinds of event a caller passes, in this order: the validator's first six, the reader's all. */
enum {
    K_MESSAGE_DELTA, K_REASONING_DELTA, K_MESSAGE, K_REASONING, K_TOOL_CALL, K_TOOL_RESULT, K_TOOL_PROGRESS,
    K_PLAIN, K_VERSION, K_PROTOCOL, K_TALLY, N_KINDS
};
enum { N_TURN_KINDS = K_TOOL_RESULT + 1 };


/* What Validator._feed_turn's loop holds: open and closed runs of each kind, open and closed calls. */
typedef struct {
    PyObject *open_runs[2]; /* messages, reasoning */
    Recent closed_runs[2];
    PyObject *open_calls;
    Recent closed_calls;
    PyObject *continuing[2]; /* of each kind, the id of the last delta found open (a new reference), or NULL:
                                deltas come in runs, and a dict lookup hashes the id anew each time */
} Turn;

/* What a step that may close runs (a complete event, a check) makes the turn forget. */
static void forget_continuing(Turn *turn, int reasoning) { Py_CLEAR(turn->continuing[reasoning]); }

/* An event that breaks no rule and cannot end the turn, recorded as its check would: 1; 0 for one its check
 * must see; -1 on an error. */
static int record_plain(Turn *turn, PyObject *event, int kind, Py_ssize_t line) {
    int reasoning = kind == K_REASONING_DELTA || kind == K_REASONING;
    PyObject *id = NULL;
    int recorded = 0;
    if (kind == K_MESSAGE_DELTA || kind == K_REASONING_DELTA) {
        id = field(event, reasoning ? F_REASONING_ID : F_MESSAGE_ID);
        if (id == NULL) return -1;
        PyObject *open = turn->open_runs[reasoning], *last = turn->continuing[reasoning];
        if (last != NULL && same_text(id, last)) {
            Py_DECREF(id);
            return 1;
        }
        recorded = PyDict_Contains(open, id);
        if (recorded > 0) Py_XSETREF(turn->continuing[reasoning], Py_NewRef(id));
        if (recorded == 0) {
            recorded = PyDict_Contains(turn->closed_runs[reasoning].ids, id);
            if (recorded == 0) {
                PyObject *number = PyLong_FromSsize_t(line);
                recorded = number == NULL || PyDict_SetItem(open, id, number) < 0 ? -1 : 1;
                Py_XDECREF(number);
            } else if (recorded > 0) {
                recorded = 0; /* a delta after its run closed: the check reports it */
            }
        }
    } else if (kind == K_MESSAGE || kind == K_REASONING) {
        id = field(event, reasoning ? F_REASONING_ID : F_MESSAGE_ID);
        if (id == NULL) return -1;
        PyObject *open = turn->open_runs[reasoning];
        forget_continuing(turn, reasoning);
        int was_open = PyDict_Contains(open, id);
        recorded = was_open < 0 || (was_open && PyDict_DelItem(open, id) < 0) ||
                           recent_add(&turn->closed_runs[reasoning], id) < 0
                       ? -1
                       : 1;
    } else if (kind == K_TOOL_CALL || kind == K_TOOL_RESULT) {
        id = field(event, F_CALL_ID);
        if (id == NULL) return -1;
        int open = PyDict_Contains(turn->open_calls, id);
        if (open < 0) {
            recorded = -1;
        } else if (kind == K_TOOL_RESULT) { /* a result pairs with its open call */
            recorded = !open ? 0
                       : PyDict_DelItem(turn->open_calls, id) < 0 || recent_add(&turn->closed_calls, id) < 0
                           ? -1
                           : 1;
        } else if (!open) { /* a call whose id was never used */
            int used = PyDict_Contains(turn->closed_calls.ids, id);
            if (used == 0) {
                PyObject *number = PyLong_FromSsize_t(line);
                recorded = number == NULL || PyDict_SetItem(turn->open_calls, id, number) < 0 ? -1 : 1;
                Py_XDECREF(number);
            } else {
                recorded = used < 0 ? -1 : 0;
            }
        }
    }
    Py_XDECREF(id);
    return recorded;
}

/* One event of Validator._feed_turn's loop that record_plain did not take: its check. 1 when it ended the
 * turn (a result, a fatal error), 0 when the loop goes on, -1 on an error. */
static int checked_event(PyObject *validator, PyObject *event, Py_ssize_t line, PyObject *checks) {
    PyObject *check = PyDict_GetItemWithError(checks, (PyObject *)Py_TYPE(event));
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

PyDoc_STRVAR(feed_turn_doc, "feed_turn(validator, events, start, first_line, state, kinds, checks) -> int\n\n"
                            "Validator._feed_turn's loop: the index after the last event it took.");

static PyObject *feed_turn(PyObject *self, PyObject *args) {
    PyObject *validator, *events, *state, *kinds, *checks;
    Py_ssize_t start, first_line;
    Turn turn;
    if (!PyArg_ParseTuple(args, "OO!nnO!O!O!", &validator, &PyList_Type, &events, &start, &first_line,
                          &PyTuple_Type, &state, &PyTuple_Type, &kinds, &PyDict_Type, &checks))
        return NULL;
    if (PyTuple_GET_SIZE(kinds) != N_TURN_KINDS || PyTuple_GET_SIZE(state) != 6) {
        PyErr_SetString(PyExc_TypeError, "feed_turn: state is six dicts, kinds six event classes");
        return NULL;
    }
    PyObject *parts[6];
    for (int at = 0; at < 6; at++) {
        parts[at] = PyTuple_GET_ITEM(state, at);
        if (!PyDict_Check(parts[at])) {
            PyErr_SetString(PyExc_TypeError, "feed_turn: each part of the state is a dict");
            return NULL;
        }
    }
    turn = (Turn){{parts[0], parts[1]}, {{parts[2], 0, 0}, {parts[3], 0, 0}}, parts[4], {parts[5], 0, 0}, {NULL, NULL}};
    PyObject *end = NULL;
    for (Py_ssize_t index = start; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, index)); /* a check may run any Python */
        PyObject *type = (PyObject *)Py_TYPE(event);
        int kind = 0;
        while (kind < N_TURN_KINDS && PyTuple_GET_ITEM(kinds, kind) != type) kind++;
        int ended = kind < N_TURN_KINDS ? record_plain(&turn, event, kind, first_line + index) : 0;
        if (ended == 0) {
            forget_continuing(&turn, 0);
            forget_continuing(&turn, 1);
            ended = checked_event(validator, event, first_line + index, checks);
        } else if (ended > 0) {
            ended = 0;
        }
        Py_DECREF(event);
        if (ended) {
            if (ended > 0) end = PyLong_FromSsize_t(index + 1);
            goto done;
        }
    }
    end = PyLong_FromSsize_t(PyList_GET_SIZE(events));
done:
    forget_continuing(&turn, 0);
    forget_continuing(&turn, 1);
    return end;
}

/* ---- the tally: Tally.add for the events most of a stream is made of ------------------------------------ */

static PyObject *open_runs_key, *open_calls_key, *add_key;

enum {
    T_TALLY, T_OPEN_RUN, T_LIMIT, T_MESSAGE_DELTA, T_REASONING_DELTA, T_MESSAGE, T_REASONING, T_TOOL_CALL,
    T_TOOL_RESULT, T_USAGE, N_TALLY_KINDS
};
/* Tally's slots, then _OpenRun's (from TA_RUN_SIZE on). */
enum {
    TA_OPEN_RUNS, TA_OPEN_CALLS, TA_TOOLS, TA_TOOLS_USED, TA_LAST_TEXT, TA_TEXT_LIMIT, TA_RUN_SIZE, TA_RUN_PARTS,
    N_TALLY_ATTRS
};
static const char *tally_attr_names[N_TALLY_ATTRS] = {"open_runs",  "open_calls",  "_tools", "tools_used",
                                                      "last_text", "_text_limit", "size",   "parts"};
static PyObject *tally_attr_keys[N_TALLY_ATTRS];
static PyObject *tally_types[2]; /* the Tally and _OpenRun classes tally_offsets are of (strong references) */
static Py_ssize_t tally_offsets[N_TALLY_ATTRS];
static PyObject *assistant_text, *ellipsis_text; /* "assistant", "…" */

/* Whether the offsets of these Tally and _OpenRun classes' slots are known (1), cannot be (0: each name must be
 * a slot of its class), or -1 on an error. */
static int tally_classes_known(PyObject *tally_class, PyObject *run_class) {
    if (tally_class == tally_types[0] && run_class == tally_types[1]) return 1;
    if (!PyType_Check(tally_class) || !PyType_Check(run_class)) {
        PyErr_SetString(PyExc_TypeError, "tally_add: the Tally and _OpenRun classes must come first");
        return -1;
    }
    Py_ssize_t offsets[N_TALLY_ATTRS];
    for (int a = 0; a < N_TALLY_ATTRS; a++) {
        offsets[a] = slot_offset((PyTypeObject *)(a < TA_RUN_SIZE ? tally_class : run_class), tally_attr_keys[a]);
        if (offsets[a] < 0) return 0;
    }
    memcpy(tally_offsets, offsets, sizeof offsets);
    Py_XSETREF(tally_types[0], Py_NewRef(tally_class));
    Py_XSETREF(tally_types[1], Py_NewRef(run_class));
    return 1;
}

/* The slot's value (borrowed), NULL when unset. */
static PyObject **tally_slot(PyObject *obj, int a) { return (PyObject **)((char *)obj + tally_offsets[a]); }

static int tally_in_python(PyObject *tally, PyObject *event) {
    PyObject *done = PyObject_CallMethodOneArg(tally, add_key, event);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* dict.pop(key, None) on an exact dict: 0, or -1 on an error. */
static int discard_key(PyObject *dict, PyObject *key) {
    int has = PyDict_Contains(dict, key);
    return has <= 0 ? has : PyDict_DelItem(dict, key);
}

/* open_runs.pop((reasoning, id), None). */
static int discard_run(PyObject *open_runs, int reasoning, PyObject *id) {
    PyObject *key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, id);
    if (key == NULL) return -1;
    int outcome = discard_key(open_runs, key);
    Py_DECREF(key);
    return outcome;
}

/* `text`, or its first `keep` characters followed by `mark` when it is longer (a new reference). */
static PyObject *cut_text(PyObject *text, Py_ssize_t keep, PyObject *mark) {
    if (PyUnicode_GET_LENGTH(text) <= keep) return Py_NewRef(text);
    PyObject *head = PyUnicode_Substring(text, 0, keep);
    if (head == NULL || mark == NULL) return head;
    PyObject *cut = PyUnicode_Concat(head, mark);
    Py_DECREF(head);
    return cut;
}

#if PY_VERSION_HEX < 0x030C0000 /* a dict's version changes with every change to it (deprecated in 3.12) */
#define DICT_VERSION(dict) (((PyDictObject *)(dict))->ma_version_tag)
/* The run the last delta found (strong references): a run's deltas come one after another, so the next one
 * is told by its id's text while open_runs has not changed since, with no key to build, hash and compare. */
static struct {
    PyObject *runs, *id, *run;
    uint64_t version;
    int reasoning;
} last_run;
#endif

/* open_runs.get((reasoning, id)): a new reference, or NULL (with an exception set on an error). */
static PyObject *find_run(PyObject *open_runs, int reasoning, PyObject *id) {
#ifdef DICT_VERSION
    if (last_run.runs == open_runs && last_run.version == DICT_VERSION(open_runs) &&
        last_run.reasoning == reasoning && same_text(id, last_run.id))
        return Py_NewRef(last_run.run);
    uint64_t version = DICT_VERSION(open_runs);
#endif
    PyObject *key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, id);
    if (key == NULL) return NULL;
    PyObject *run = Py_XNewRef(PyDict_GetItemWithError(open_runs, key));
    Py_DECREF(key);
#ifdef DICT_VERSION
    /* the version from before the lookup: were the dict changed by Python a key's __eq__ ran, none would match */
    if (run != NULL && PyUnicode_CheckExact(id)) {
        Py_XSETREF(last_run.runs, Py_NewRef(open_runs));
        Py_XSETREF(last_run.id, Py_NewRef(id));
        Py_XSETREF(last_run.run, Py_NewRef(run));
        last_run.version = version;
        last_run.reasoning = reasoning;
    }
#endif
    return run;
}

/* A delta: its run's text grows, up to the limit. A delta that opens a run is Tally.add's (1); else 0 or -1. */
static int tally_delta(PyObject *tally, PyObject *open_runs, PyObject *event, TypeSlots *slots, int reasoning,
                       Py_ssize_t limit) {
    PyObject *id = slot_field(event, slots, reasoning ? F_REASONING_ID : F_MESSAGE_ID), *run = NULL;
    PyObject *text = NULL, *after = NULL, *kept = NULL;
    int outcome = -1;
    if (id == NULL) goto done;
    if ((run = find_run(open_runs, reasoning, id)) == NULL) {
        outcome = PyErr_Occurred() ? -1 : 1;
        goto done;
    }
    if ((text = slot_field(event, slots, F_CONTENT)) == NULL) goto done;
    PyObject *size = Py_TYPE(run) == (PyTypeObject *)tally_types[1] ? *tally_slot(run, TA_RUN_SIZE) : NULL;
    PyObject *parts = size != NULL ? *tally_slot(run, TA_RUN_PARTS) : NULL;
    Py_ssize_t before = parts != NULL && PyLong_CheckExact(size) ? PyLong_AsSsize_t(size) : -1;
    if (before == -1 && PyErr_Occurred()) PyErr_Clear();
    if (before < 0 || !PyList_CheckExact(parts) || !PyUnicode_CheckExact(text)) {
        outcome = 1; /* not as Tally.add leaves a run */
        goto done;
    }
    Py_INCREF(parts);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    if ((after = PyLong_FromSsize_t(before + length)) != NULL) {
        Py_SETREF(*tally_slot(run, TA_RUN_SIZE), Py_NewRef(after));
        outcome = 0;
        if (before < limit) {
            kept = cut_text(text, limit - before, NULL);
            outcome = kept == NULL || PyList_Append(parts, kept) < 0 ? -1 : 0;
        }
    }
    Py_DECREF(parts);
done:
    Py_XDECREF(id);
    Py_XDECREF(run);
    Py_XDECREF(text);
    Py_XDECREF(after);
    Py_XDECREF(kept);
    return outcome;
}

/* A tool call: open, and its tool counted as used when it is the first of its name. 0, or -1. */
static int tally_call(PyObject *open_calls, PyObject *tools, PyObject *used, PyObject *event, TypeSlots *slots) {
    PyObject *name = slot_field(event, slots, F_NAME), *call_id = NULL;
    int outcome = -1;
    if (name == NULL || (call_id = slot_field(event, slots, F_CALL_ID)) == NULL ||
        PyDict_SetItem(open_calls, call_id, name) < 0)
        goto done;
    int known = PySet_Contains(tools, name);
    if (known == 0) known = PySet_Add(tools, name) < 0 || PyList_Append(used, name) < 0 ? -1 : 1;
    outcome = known < 0 ? -1 : 0;
done:
    Py_XDECREF(name);
    Py_XDECREF(call_id);
    return outcome;
}

/* A complete message: its run closed, and (an assistant's, not empty) the last text, cut at the tally's own
 * limit. One of a kind Tally.add reads otherwise is Tally.add's (1); else 0 or -1. */
static int tally_message(PyObject *tally, PyObject *open_runs, PyObject *event, TypeSlots *slots) {
    PyObject *id = NULL, *text = NULL, *role = NULL, *last = NULL;
    int outcome = -1;
    if (PyDict_GET_SIZE(open_runs) > 0 &&
        ((id = slot_field(event, slots, F_MESSAGE_ID)) == NULL || discard_run(open_runs, 0, id) < 0))
        goto done;
    if ((text = slot_field(event, slots, F_CONTENT)) == NULL || (role = slot_field(event, slots, F_ROLE)) == NULL)
        goto done;
    int assistant = PyObject_RichCompareBool(role, assistant_text, Py_EQ);
    int said = assistant > 0 ? PyObject_IsTrue(text) : assistant;
    if (said <= 0) {
        outcome = said;
        goto done;
    }
    PyObject *limit = *tally_slot(tally, TA_TEXT_LIMIT);
    Py_ssize_t keep = limit == Py_None ? PY_SSIZE_T_MAX : -1;
    if (limit != NULL && PyLong_CheckExact(limit) && (keep = PyLong_AsSsize_t(limit)) == -1) PyErr_Clear();
    if (keep < 0 || !PyUnicode_CheckExact(text)) {
        outcome = 1; /* Tally.add pops the run again, which does nothing */
        goto done;
    }
    if ((last = cut_text(text, keep, ellipsis_text)) != NULL) {
        Py_XSETREF(*tally_slot(tally, TA_LAST_TEXT), Py_NewRef(last));
        outcome = 0;
    }
done:
    Py_XDECREF(id);
    Py_XDECREF(text);
    Py_XDECREF(role);
    Py_XDECREF(last);
    return outcome;
}

/* Tally.add(tally, event), done here when the tally is a Tally as its own steps leave one; any other case (and
 * a usage, and a delta that opens a run) is Tally.add's. 0, or -1 with an exception set. */
static int tally_event(PyObject *tally, PyObject *event, PyObject *kinds_tuple) {
    if (!PyTuple_CheckExact(kinds_tuple) || PyTuple_GET_SIZE(kinds_tuple) != N_TALLY_KINDS ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(kinds_tuple, T_LIMIT))) {
        PyErr_SetString(PyExc_TypeError, "tally_add: kinds of the wrong kind");
        return -1;
    }
    PyObject *const *kinds = &PyTuple_GET_ITEM(kinds_tuple, 0);
    int known = tally_classes_known(kinds[T_TALLY], kinds[T_OPEN_RUN]);
    if (known < 0) return -1;
    PyObject *open_runs = *tally_slot(tally, TA_OPEN_RUNS), *open_calls = *tally_slot(tally, TA_OPEN_CALLS);
    PyObject *tools = *tally_slot(tally, TA_TOOLS), *used = *tally_slot(tally, TA_TOOLS_USED);
    PyObject *kind = (PyObject *)Py_TYPE(event);
    if (!known || (PyObject *)Py_TYPE(tally) != kinds[T_TALLY] || open_runs == NULL || open_calls == NULL ||
        tools == NULL || used == NULL || !PyDict_CheckExact(open_runs) || !PyDict_CheckExact(open_calls) ||
        !PySet_CheckExact(tools) || !PyList_CheckExact(used) || kind == kinds[T_USAGE])
        return tally_in_python(tally, event);
    Py_ssize_t limit = PyLong_AsSsize_t(kinds[T_LIMIT]);
    if (limit == -1 && PyErr_Occurred()) return -1;
    TypeSlots *slots = slots_of(Py_TYPE(event));
    /* the containers are held: the steps below may run Python (a key's __eq__), which may replace them */
    PyObject *held[4] = {Py_NewRef(open_runs), Py_NewRef(open_calls), Py_NewRef(tools), Py_NewRef(used)};
    int outcome = 0;
    if (kind == kinds[T_MESSAGE_DELTA] || kind == kinds[T_REASONING_DELTA])
        outcome = tally_delta(tally, open_runs, event, slots, kind == kinds[T_REASONING_DELTA], limit);
    else if (kind == kinds[T_TOOL_CALL]) outcome = tally_call(open_calls, tools, used, event, slots);
    else if (kind == kinds[T_TOOL_RESULT] || kind == kinds[T_REASONING]) {
        int call = kind == kinds[T_TOOL_RESULT];
        PyObject *id = slot_field(event, slots, call ? F_CALL_ID : F_REASONING_ID);
        outcome = id == NULL ? -1 : call ? discard_key(open_calls, id) : discard_run(open_runs, 1, id);
        Py_XDECREF(id);
    } else if (kind == kinds[T_MESSAGE]) outcome = tally_message(tally, open_runs, event, slots);
    for (int h = 0; h < 4; h++) Py_DECREF(held[h]);
    return outcome == 1 ? tally_in_python(tally, event) : outcome;
}

PyDoc_STRVAR(tally_add_doc, "tally_add(kinds, tally, event)\n\nTally.add(tally, event), in C (see transcript.py).");

static PyObject *tally_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "tally_add takes 3 arguments");
        return NULL;
    }
    if (tally_event(args[1], args[2], args[0]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- the reader: ordinary events of an open turn --------------------------------------------------- */

static PyObject *one; /* the int 1, for seq + 1 */
static PyObject *now_ts_key; /* protocol.now_ts, looked up when called, as the Python twins do */

/* Whether event is ordinary here (1), not (0), or -1 on an error; notes a closed run or call as the Python
 * twin does. */
static int ordinary(PyObject *event, TypeSlots *slots, PyObject *const *kinds, PyObject *open_runs,
                    PyObject *open_calls, Recent *closed_runs, Recent *closed_calls) {
    PyObject *kind = (PyObject *)Py_TYPE(event);
    int reasoning = kind == kinds[K_REASONING_DELTA] || kind == kinds[K_REASONING];
    if (kind == kinds[K_MESSAGE_DELTA] || kind == kinds[K_REASONING_DELTA] || kind == kinds[K_MESSAGE] ||
        kind == kinds[K_REASONING]) {
        PyObject *id = slot_field(event, slots, reasoning ? F_REASONING_ID : F_MESSAGE_ID);
        if (id == NULL) return -1;
        PyObject *run_key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, id);
        Py_DECREF(id);
        if (run_key == NULL) return -1;
        if (kind == kinds[K_MESSAGE] || kind == kinds[K_REASONING]) {
            int added = recent_add(closed_runs, run_key);
            Py_DECREF(run_key);
            return added < 0 ? -1 : 1;
        }
        int open = PyDict_Contains(open_runs, run_key);
        int closed = open == 0 ? PyDict_Contains(closed_runs->ids, run_key) : 0;
        Py_DECREF(run_key);
        if (open < 0 || closed < 0) return -1;
        return open || !closed;
    }
    if (kind == kinds[K_TOOL_CALL] || kind == kinds[K_TOOL_RESULT] || kind == kinds[K_TOOL_PROGRESS]) {
        PyObject *call_id = slot_field(event, slots, F_CALL_ID);
        if (call_id == NULL) return -1;
        int open = PyDict_Contains(open_calls, call_id), closed = 0, plain;
        if (open >= 0 && kind != kinds[K_TOOL_PROGRESS]) closed = PyDict_Contains(closed_calls->ids, call_id);
        if (open < 0 || closed < 0) {
            Py_DECREF(call_id);
            return -1;
        }
        if (kind == kinds[K_TOOL_CALL]) plain = !open && !closed;
        else if (kind == kinds[K_TOOL_PROGRESS]) plain = open;
        else {
            plain = open && !closed;
            if (plain && recent_add(closed_calls, call_id) < 0) plain = -1;
        }
        Py_DECREF(call_id);
        return plain;
    }
    return PySet_Contains(kinds[K_PLAIN], kind);
}

PyDoc_STRVAR(accept_plain_doc,
             "accept_plain(events, start, out, tally, closed_runs, closed_calls, session, seq, times_fit, "
             "kinds) -> (index, seq)\n\n"
             "pipeline._accept_plain_py, in C.");

static PyObject *accept_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "accept_plain takes 10 arguments");
        return NULL;
    }
    PyObject *events = args[0], *out = args[2], *tally = args[3];
    Recent closed_runs = {args[4], 0, 0}, closed_calls = {args[5], 0, 0};
    PyObject *session = args[6], *kinds_tuple = args[9];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    int times_fit = PyObject_IsTrue(args[8]);
    if (times_fit < 0) return NULL;
    if (!PyList_Check(events) || !PyList_Check(out) || !PyDict_Check(args[4]) || !PyDict_Check(args[5]) ||
        !PyTuple_Check(kinds_tuple) || PyTuple_GET_SIZE(kinds_tuple) != N_KINDS || !PyLong_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "accept_plain: arguments of the wrong kind");
        return NULL;
    }
    PyObject *kinds[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) kinds[k] = PyTuple_GET_ITEM(kinds_tuple, k);
    if (!PyAnySet_Check(kinds[K_PLAIN])) {
        PyErr_SetString(PyExc_TypeError, "accept_plain: kinds of the wrong kind");
        return NULL;
    }
    PyObject *seq = Py_NewRef(args[7]), *open_runs = PyObject_GetAttr(tally, open_runs_key);
    PyObject *open_calls = PyObject_GetAttr(tally, open_calls_key);
    PyObject *good_ts = NULL, *result = NULL;
    Py_ssize_t index = start;
    if (open_runs == NULL || open_calls == NULL) goto done;
    if (!PyDict_Check(open_runs) || !PyDict_Check(open_calls)) {
        PyErr_SetString(PyExc_TypeError, "accept_plain: the tally's open runs and calls must be dicts");
        goto done;
    }
    for (; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, index)); /* the steps below may run Python */
        TypeSlots *slots = slots_of(Py_TYPE(event));
        int plain = ordinary(event, slots, kinds, open_runs, open_calls, &closed_runs, &closed_calls);
        int failed = plain < 0;
        if (plain > 0) {
            failed = set_slot_field(event, slots, F_V, kinds[K_VERSION]) < 0 ||
                     set_slot_field(event, slots, F_SESSION_ID, session) < 0 ||
                     set_slot_field(event, slots, F_SEQ, seq) < 0;
            if (!failed && !times_fit) {
                PyObject *ts = slot_field(event, slots, F_TS);
                failed = ts == NULL;
                if (!failed && ts != good_ts) {
                    if (is_timestamp(ts)) Py_XSETREF(good_ts, Py_NewRef(ts));
                    else {
                        PyObject *now = PyObject_CallMethodNoArgs(kinds[K_PROTOCOL], now_ts_key);
                        failed = now == NULL || set_slot_field(event, slots, F_TS, now) < 0;
                        Py_XDECREF(now);
                    }
                }
                Py_XDECREF(ts);
            }
            if (!failed) {
                Py_SETREF(seq, PyNumber_Add(seq, one));
                failed = seq == NULL;
            }
            if (!failed) failed = tally_event(tally, event, kinds[K_TALLY]) < 0;
            if (!failed) failed = PyList_Append(out, event) < 0;
        }
        Py_DECREF(event);
        if (failed) goto done;
        if (!plain) break;
    }
    result = Py_BuildValue("nO", index, seq);
done:
    Py_XDECREF(seq);
    Py_XDECREF(open_runs);
    Py_XDECREF(open_calls);
    Py_XDECREF(good_ts);
    return result;
}

/* ---- the producer: an event stamped, encoded and tallied ------------------------------------------------- */

enum { E_ENCODE_INTO, E_UNENCODABLE, E_TALLY, E_NOW_TS, E_WRITE, N_EMIT_KINDS };

/* The exception being raised, taken (with its traceback) as a new reference to return. */
static PyObject *take_exception(void) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

PyDoc_STRVAR(stamp_line_doc,
             "stamp_line(event, sequencer, buffer, tally, fd, kinds) -> exception, bytes written or None\n\n"
             "stream._stamp_line_py, in C.");

static PyObject *stamp_line(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "stamp_line takes 6 arguments");
        return NULL;
    }
    PyObject *event = args[0], *sequencer = args[1], *buffer = args[2], *tally = args[3], *kinds_tuple = args[5];
    if (!PyLong_CheckExact(args[4]) || !PyByteArray_Check(buffer) || !PyTuple_CheckExact(kinds_tuple) ||
        PyTuple_GET_SIZE(kinds_tuple) != N_EMIT_KINDS) {
        PyErr_SetString(PyExc_TypeError, "stamp_line: arguments of the wrong kind");
        return NULL;
    }
    PyObject *const *kinds = &PyTuple_GET_ITEM(kinds_tuple, 0);
    TypeSlots *slots = slots_of(Py_TYPE(event));
    PyObject *session = sequencer_field(sequencer, F_SESSION_ID), *seq = NULL, *ts = NULL;
    PyObject *now = NULL, *encoded = NULL, *next = NULL, *written = NULL, *result = NULL;
    long fd = PyLong_AsLong(args[4]);
    int to_fd = fd >= 0;
    if ((fd == -1 && PyErr_Occurred()) || session == NULL || (seq = sequencer_field(sequencer, F_NEXT_SEQ)) == NULL ||
        set_slot_field(event, slots, F_SESSION_ID, session) < 0 || set_slot_field(event, slots, F_SEQ, seq) < 0 ||
        (ts = slot_field(event, slots, F_TS)) == NULL)
        goto done;
    int timed = PyObject_IsTrue(ts);
    if (timed < 0 || (!timed && ((now = PyObject_CallNoArgs(kinds[E_NOW_TS])) == NULL ||
                                 set_slot_field(event, slots, F_TS, now) < 0)))
        goto done;
    /* encoded before the seq is taken and the event counted: one that cannot be written takes neither */
    PyObject *encode_args[2] = {event, buffer};
    if ((encoded = PyObject_Vectorcall(kinds[E_ENCODE_INTO], encode_args, 2, NULL)) == NULL) {
        if (PyErr_ExceptionMatches(kinds[E_UNENCODABLE])) result = take_exception();
        goto done;
    }
    if ((next = PyNumber_Add(seq, one)) == NULL || set_sequencer_field(sequencer, F_NEXT_SEQ, next) < 0) goto done;
    if (tally_event(tally, event, kinds[E_TALLY]) < 0) goto done;
    if (to_fd) { /* the line and its newline in one write (os.write: the GIL let go, EINTR retried) */
        Py_ssize_t size = PyByteArray_GET_SIZE(buffer);
        if (PyByteArray_Resize(buffer, size + 1) < 0) goto done;
        PyByteArray_AS_STRING(buffer)[size] = '\n';
        PyObject *write_args[2] = {args[4], buffer};
        if ((written = PyObject_Vectorcall(kinds[E_WRITE], write_args, 2, NULL)) == NULL) goto done;
        Py_ssize_t count = PyLong_AsSsize_t(written);
        if (count == -1 && PyErr_Occurred()) goto done;
        if (count < size + 1) { /* a pipe took part of a long line: the caller writes the rest */
            result = Py_NewRef(written);
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(session);
    Py_XDECREF(seq);
    Py_XDECREF(ts);
    Py_XDECREF(now);
    Py_XDECREF(encoded);
    Py_XDECREF(next);
    Py_XDECREF(written);
    return result;
}

/* ---- the Claude encoder: a run of text deltas, each to its stream_event line ------------------------------ */

enum { D_DELTA, D_ROLE, D_HEAD, D_TAIL, D_ENCODE, D_TALLY, D_LINE_PARTS, N_DELTA_KINDS };
#define LINE_PARTS 5 /* _STREAM_LINE around its inner event, session, uuid prefix and counter */

/* `value` in lower-case hex, at least 12 digits (as "%012llx" writes it, without snprintf's cost), into `out`
 * (16 bytes): how many digits. */
static int hex_counter(char *out, unsigned long long value) {
    int digits = 12;
    while (digits < 16 && value >> (4 * digits) != 0) digits++;
    for (int at = digits - 1; at >= 0; at--, value >>= 4) out[at] = "0123456789abcdef"[value & 15];
    return digits;
}

/* The pieces of a line, in order, into a new bytes object (NULL with an exception set). */
static PyObject *joined(const char *const *starts, const Py_ssize_t *sizes, int count) {
    Py_ssize_t total = 0;
    for (int at = 0; at < count; at++) total += sizes[at];
    PyObject *line = PyBytes_FromStringAndSize(NULL, total);
    if (line == NULL) return NULL;
    char *out = PyBytes_AS_STRING(line);
    for (int at = 0; at < count; at++) {
        memcpy(out, starts[at], sizes[at]);
        out += sizes[at];
    }
    return line;
}

PyDoc_STRVAR(claude_deltas_doc,
             "claude_deltas(events, index, lines, run_id, session_id, session_json, uuid_prefix, uuids, tally, "
             "kinds) -> index\n\n"
             "claude._write_deltas_py, in C.");

static PyObject *claude_deltas(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "claude_deltas takes 10 arguments");
        return NULL;
    }
    PyObject *events = args[0], *lines = args[2], *run_id = args[3], *session_id = args[4];
    PyObject *session_json = args[5], *prefix = args[6], *tally = args[8], *kinds_tuple = args[9];
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    unsigned long long uuids = PyLong_AsUnsignedLongLong(args[7]);
    if (uuids == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (!PyList_Check(events) || !PyList_Check(lines) || !PyBytes_Check(session_json) || !PyBytes_Check(prefix) ||
        !PyTuple_Check(kinds_tuple) || PyTuple_GET_SIZE(kinds_tuple) != N_DELTA_KINDS) {
        PyErr_SetString(PyExc_TypeError, "claude_deltas: arguments of the wrong kind");
        return NULL;
    }
    PyObject *const *kinds = &PyTuple_GET_ITEM(kinds_tuple, 0);
    PyObject *parts = kinds[D_LINE_PARTS];
    if (!PyBytes_Check(kinds[D_HEAD]) || !PyBytes_Check(kinds[D_TAIL]) || !PyTuple_Check(parts) ||
        PyTuple_GET_SIZE(parts) != LINE_PARTS) {
        PyErr_SetString(PyExc_TypeError, "claude_deltas: kinds of the wrong kind");
        return NULL;
    }
    for (int at = 0; at < LINE_PARTS; at++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(parts, at))) {
            PyErr_SetString(PyExc_TypeError, "claude_deltas: the line's pieces are bytes");
            return NULL;
        }
    }
    int failed = 0;
    for (; !failed && index < PyList_GET_SIZE(events); index++) {
        PyObject *event = Py_NewRef(PyList_GET_ITEM(events, index)); /* the steps below may run Python */
        PyObject *message_id = NULL, *event_session = NULL, *role = NULL, *content = NULL, *text = NULL;
        int same = 0;
        if ((PyObject *)Py_TYPE(event) == kinds[D_DELTA]) {
            TypeSlots *slots = slots_of(Py_TYPE(event));
            failed = (message_id = slot_field(event, slots, F_MESSAGE_ID)) == NULL ||
                     (event_session = slot_field(event, slots, F_SESSION_ID)) == NULL ||
                     (role = slot_field(event, slots, F_ROLE)) == NULL;
            if (!failed) same = PyObject_RichCompareBool(message_id, run_id, Py_EQ);
            if (same > 0) same = PyObject_RichCompareBool(event_session, session_id, Py_EQ);
            if (same > 0) same = PyObject_RichCompareBool(role, kinds[D_ROLE], Py_EQ);
            failed = failed || same < 0;
            if (same > 0) {
                failed = tally_event(tally, event, kinds[D_TALLY]) < 0 ||
                         (content = slot_field(event, slots, F_CONTENT)) == NULL ||
                         (text = PyObject_CallOneArg(kinds[D_ENCODE], content)) == NULL;
                if (!failed && !PyBytes_Check(text)) {
                    PyErr_SetString(PyExc_TypeError, "claude_deltas: the encoder gave no bytes");
                    failed = 1;
                }
                if (!failed) {
                    char counter[16];
                    int counter_size = hex_counter(counter, ++uuids);
                    PyObject *pieces[9] = {PyTuple_GET_ITEM(parts, 0), kinds[D_HEAD], text, kinds[D_TAIL],
                                           PyTuple_GET_ITEM(parts, 1), session_json, PyTuple_GET_ITEM(parts, 2),
                                           prefix, PyTuple_GET_ITEM(parts, 3)};
                    const char *starts[11];
                    Py_ssize_t sizes[11];
                    for (int at = 0; at < 9; at++) {
                        starts[at] = PyBytes_AS_STRING(pieces[at]);
                        sizes[at] = PyBytes_GET_SIZE(pieces[at]);
                    }
                    starts[9] = counter, sizes[9] = counter_size;
                    starts[10] = PyBytes_AS_STRING(PyTuple_GET_ITEM(parts, 4));
                    sizes[10] = PyBytes_GET_SIZE(PyTuple_GET_ITEM(parts, 4));
                    PyObject *line = joined(starts, sizes, 11);
                    failed = line == NULL || PyList_Append(lines, line) < 0;
                    Py_XDECREF(line);
                }
            }
        }
        Py_DECREF(event);
        Py_XDECREF(message_id);
        Py_XDECREF(event_session);
        Py_XDECREF(role);
        Py_XDECREF(content);
        Py_XDECREF(text);
        if (failed) return NULL;
        if (same <= 0) break;
    }
    return PyLong_FromSsize_t(index);
}

/* ---- the Claude dialect: the lines of a partial-message stream that need no Python step ------------------- */

enum {
    C_STREAM_LINE, C_BLOCK_DELTA, C_TEXT_DELTA, C_THINKING_DELTA, C_QUIET_DELTA, C_SIGNATURE_DELTA,
    C_MESSAGE_DELTA, C_REASONING_DELTA, C_PROTOCOL, C_UNDECODED, C_TEXT, C_THINKING, C_GENERIC_EVENT,
    C_THINKING_TOKENS, C_STATUS, N_CLAUDE
};
enum {
    A_EVENT, A_DELTA, A_INDEX, A_TEXT_FIELD, A_THINKING_FIELD, A_CURRENT, A_STREAMS, A_STARTED, A_LOST, A_NAMED,
    A_PARTS, A_RUN_ID, A_ROLE, A_RUN_TS, A_LAST_FATAL, A_TURN_ENDED, A_SEQUENCER, A_LINE_TS,
    A_CLOCK, A_OUT, A_RUN, A_TALLY, A_USAGE, A_HELD, A_IN_REPLY, A_ANSWER, A_REASONING, A_TOOLS, A_OPEN, A_SHOWN,
    A_TEXTS, A_LAST_TEXT, A_REPLIES, N_ATTRS
};
static const char *attr_names[N_ATTRS] = {
    "event", "delta", "index", "text", "thinking", "_current", "_streams", "started", "_lost", "_named", "parts",
    "run_id", "role", "ts", "last_fatal", "turn_ended", "sequencer", "line_ts", "_clock", "_out", "_run",
    "tally", "_usage", "_held", "_in_reply", "_answer", "reasoning", "tools", "_open", "_shown", "_texts", "_last_text",
    "_replies"};
static PyObject *attr_keys[N_ATTRS];
static PyObject *message_delta_names, *reasoning_delta_names, *generic_event_names, *status_names[2];
/* events' keyword names (status_names: without the message, with it) */
static PyObject *idle_text, *empty_text; /* "idle" (a status line's status when it has none), "" */
static PyObject *thinking_tokens_keys[4]; /* the data a thinking_tokens line gives, in _SystemLine.data's order */

#define GET(obj, a) PyObject_GetAttr((obj), attr_keys[a])
#define SET(obj, a, value) PyObject_SetAttr((obj), attr_keys[a], (value))

/* `event` in the session at *next_seq (which moves on), at `ts` (NULL: now, from `protocol`), queued on `out`:
 * what EventDecoder._stamp does to an event of an open turn once it is tallied. 0, or -1 on an error. */
static int stamp_queued(PyObject *event, PyObject *session, PyObject **next_seq, PyObject *ts, PyObject *protocol,
                        PyObject *out) {
    PyObject *now = NULL, *next = NULL;
    int outcome = -1;
    if (ts == NULL && (now = PyObject_CallMethodNoArgs(protocol, now_ts_key)) == NULL) return -1;
    TypeSlots *slots = slots_of(Py_TYPE(event));
    if (set_slot_field(event, slots, F_SESSION_ID, session) == 0 &&
        set_slot_field(event, slots, F_SEQ, *next_seq) == 0 &&
        set_slot_field(event, slots, F_TS, now != NULL ? now : ts) == 0 &&
        (next = PyNumber_Add(*next_seq, one)) != NULL && PyList_Append(out, event) == 0) {
        Py_SETREF(*next_seq, next);
        next = NULL;
        outcome = 0;
    }
    Py_XDECREF(now);
    Py_XDECREF(next);
    return outcome;
}

/* The time a decoder stamps its events with: the line's own, else the reading's clock (a new reference in
 * *ts), else NULL (now, read per event). 0, or -1 on an error. */
static int reading_time(PyObject *decoder, PyObject **ts) {
    static const int sources[2] = {A_LINE_TS, A_CLOCK};
    for (int k = 0; k < 2 && *ts == NULL; k++) {
        PyObject *value = GET(decoder, sources[k]);
        if (value == NULL) return -1;
        int truthy = PyObject_IsTrue(value);
        if (truthy > 0) *ts = value;
        else Py_DECREF(value);
        if (truthy < 0) return -1;
    }
    return 0;
}

/* What the skim reads of a decoder once per call: none of it changes while deltas of open runs are read
 * (their steps change the runs' parts, the seq and the queue, and set last_fatal and turn_ended). */
typedef struct {
    PyObject *kinds[N_CLAUDE];
    PyObject *current;   /* the current message's id, or None */
    PyObject *streams;   /* message id -> its blocks */
    PyObject *blocks;    /* the current message's blocks: index -> (kind, block id); NULL when none */
    PyObject *named;     /* (reasoning, id) -> kit._Run */
    PyObject *sequencer;
    PyObject *session;
    PyObject *ts;        /* the line's time or the reading's clock; NULL: now, per event */
    PyObject *out;
    PyObject *next_seq;  /* the seq of the next event (written back at the end) */
    PyObject *tally_add; /* the decoder's tally.add; NULL while a run of chunk() is open (emit closes it) */
    int inline_stamps;   /* started, and no field lost on the line being read: delta() stamps inline */
    int queued;          /* events queued in this call */
    int ready;           /* the above read (skim_ready) */
} Skim;

static void skim_clear(Skim *skim) {
    Py_CLEAR(skim->current);
    Py_CLEAR(skim->streams);
    Py_CLEAR(skim->blocks);
    Py_CLEAR(skim->named);
    Py_CLEAR(skim->sequencer);
    Py_CLEAR(skim->session);
    Py_CLEAR(skim->ts);
    Py_CLEAR(skim->out);
    Py_CLEAR(skim->next_seq);
    Py_CLEAR(skim->tally_add);
}

/* 0, or -1 with an exception set. */
static int skim_init(Skim *skim, PyObject *decoder) {
    PyObject *started = NULL, *lost = NULL;
    int outcome = -1;
    if ((skim->current = GET(decoder, A_CURRENT)) == NULL || (skim->streams = GET(decoder, A_STREAMS)) == NULL ||
        (started = GET(decoder, A_STARTED)) == NULL || (lost = GET(decoder, A_LOST)) == NULL ||
        (skim->named = GET(decoder, A_NAMED)) == NULL ||
        (skim->sequencer = GET(decoder, A_SEQUENCER)) == NULL || (skim->out = GET(decoder, A_OUT)) == NULL ||
        (skim->session = sequencer_field(skim->sequencer, F_SESSION_ID)) == NULL ||
        (skim->next_seq = sequencer_field(skim->sequencer, F_NEXT_SEQ)) == NULL)
        goto done;
    if (skim->current != Py_None && PyDict_Check(skim->streams)) {
        skim->blocks = PyDict_GetItemWithError(skim->streams, skim->current);
        if (skim->blocks == NULL && PyErr_Occurred()) goto done;
        if (skim->blocks != NULL && !PyDict_Check(skim->blocks)) skim->blocks = NULL;
        Py_XINCREF(skim->blocks);
    }
    int is_started = PyObject_IsTrue(started), is_lost = PyObject_IsTrue(lost);
    if (is_started < 0 || is_lost < 0) goto done;
    skim->inline_stamps = is_started && !is_lost && PyDict_Check(skim->named) && PyList_Check(skim->out);
    if (reading_time(decoder, &skim->ts) < 0) goto done;
    PyObject *run = GET(decoder, A_RUN);
    if (run == NULL) goto done;
    int run_open = run != Py_None;
    Py_DECREF(run);
    if (!run_open) { /* with a chunk() run open, emit() closes it first: decode_typed's to do */
        PyObject *tally = GET(decoder, A_TALLY);
        if (tally == NULL) goto done;
        skim->tally_add = PyObject_GetAttr(tally, add_key);
        Py_DECREF(tally);
        if (skim->tally_add == NULL) goto done;
    }
    outcome = 0;
done:
    Py_XDECREF(started);
    Py_XDECREF(lost);
    return outcome;
}

/* The decoder's state read once, when a line first needs it: a call that stops at its first line (as most
 * do after a line decode_typed reads) reads none of it. 0, or -1 with an exception set. */
static int skim_ready(Skim *skim, PyObject *decoder) {
    if (skim->ready) return 0;
    if (skim_init(skim, decoder) < 0) return -1;
    skim->ready = 1;
    return 0;
}

/* What was read goes back to the decoder: its next seq, and (once an event was queued) what delta() sets. */
static int skim_finish(Skim *skim, PyObject *decoder) {
    if (skim->queued == 0) return 0;
    return set_sequencer_field(skim->sequencer, F_NEXT_SEQ, skim->next_seq) < 0 || SET(decoder, A_LAST_FATAL, Py_None) < 0 ||
                   SET(decoder, A_TURN_ENDED, Py_False) < 0
               ? -1
               : 0;
}

/* What a line is to the skim: one that gives no event and changes nothing (a tool input or signature delta,
 * a tool_use block's start), a text or thinking delta, a block's or a message's stop, a thinking_tokens or
 * status system line, or any other (decode_typed's own steps). */
enum {
    LINE_OTHER, LINE_QUIET, LINE_TEXT, LINE_THINKING, LINE_BLOCK_STOP, LINE_MESSAGE_STOP, LINE_THINKING_TOKENS,
    LINE_STATUS
};

/* The delta a typed line carries: its LINE_* kind, with *index and *text (new references) for LINE_TEXT and
 * LINE_THINKING; -1 on an error. */
static int typed_delta(Skim *skim, PyObject *line, PyObject **index, PyObject **text) {
    PyObject *const *kinds = skim->kinds;
    if ((PyObject *)Py_TYPE(line) != kinds[C_STREAM_LINE]) return LINE_OTHER;
    PyObject *event = GET(line, A_EVENT), *delta = NULL;
    int outcome = -1;
    if (event == NULL) return -1;
    if ((PyObject *)Py_TYPE(event) != kinds[C_BLOCK_DELTA]) {
        outcome = LINE_OTHER;
        goto done;
    }
    if ((delta = GET(event, A_DELTA)) == NULL) goto done;
    PyObject *kind = (PyObject *)Py_TYPE(delta);
    if (kind == kinds[C_QUIET_DELTA] || kind == kinds[C_SIGNATURE_DELTA]) outcome = LINE_QUIET;
    else if (kind == kinds[C_TEXT_DELTA] || kind == kinds[C_THINKING_DELTA]) {
        int reasoning = kind == kinds[C_THINKING_DELTA];
        if ((*text = GET(delta, reasoning ? A_THINKING_FIELD : A_TEXT_FIELD)) == NULL ||
            (*index = GET(event, A_INDEX)) == NULL) {
            Py_CLEAR(*text);
            goto done;
        }
        outcome = reasoning ? LINE_THINKING : LINE_TEXT;
    } else outcome = LINE_OTHER;
done:
    Py_DECREF(event);
    Py_XDECREF(delta);
    return outcome;
}

/* The open run a delta of block `index` continues: 1 with *run (a new reference); 2 for nothing to do (an
 * empty text of a known block); 0 when decode_typed's own steps must read it; -1 on an error. Nothing is
 * changed. */
static int open_run_of(Skim *skim, PyObject *index, PyObject *text, int reasoning, PyObject **run) {
    /* _stream_delta: the block must be one of the current message's, of this kind */
    if (skim->blocks == NULL || !PyUnicode_Check(text)) return 0;
    PyObject *block = PyDict_GetItemWithError(skim->blocks, index);
    if (block == NULL || !PyTuple_CheckExact(block) || PyTuple_GET_SIZE(block) != 2) return PyErr_Occurred() ? -1 : 0;
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(block, 0), skim->kinds[reasoning ? C_THINKING : C_TEXT], Py_EQ);
    if (same <= 0) return same;
    if (PyUnicode_GET_LENGTH(text) == 0) return 2;
    /* delta(): stamped inline only once started, with no field lost on this line, for a run already open */
    if (!skim->inline_stamps) return 0;
    PyObject *run_key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, PyTuple_GET_ITEM(block, 1));
    if (run_key == NULL) return -1;
    *run = PyDict_GetItemWithError(skim->named, run_key);
    Py_DECREF(run_key);
    if (*run == NULL) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(*run);
    return 1;
}

/* -- Claude's delta lines, read without msgspec --------------------------------------------------------------
 * The delta lines of a partial-message stream are most of its lines, and msgspec builds three structs and
 * three strings for each only for the skim to read two fields. The scan below reads the compact form Claude
 * Code writes (no whitespace, "type" first in each object, no key twice, strings without a surrogate escape,
 * the fields of no interest strings, null, true or false) and answers LINE_OTHER for any other form: msgspec
 * then decodes the line as before, so whatever the scan accepts decodes there to the same values. */

typedef struct {
    const char *at, *end;
} Scan;

static int scan_literal(Scan *scan, const char *literal, size_t size) {
    if ((size_t)(scan->end - scan->at) < size || memcmp(scan->at, literal, size) != 0) return 0;
    scan->at += size;
    return 1;
}
#define LITERAL(scan, text) scan_literal((scan), (text), sizeof(text) - 1)

static int hex_digit(unsigned char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The four hex digits of a \u escape, or -1. */
static long hex4(const unsigned char *at) {
    long code = 0;
    for (int k = 0; k < 4; k++) {
        int digit = hex_digit(at[k]);
        if (digit < 0) return -1;
        code = code * 16 + digit;
    }
    return code;
}

/* A JSON string's unescaped UTF-8 into `out` (room for `size` bytes: escapes never lengthen). Its length. */
static Py_ssize_t unescape(const unsigned char *at, Py_ssize_t size, char *out) {
    char *to = out;
    for (const unsigned char *end = at + size; at < end;) {
        if (*at != '\\') {
            *to++ = (char)*at++;
            continue;
        }
        unsigned char e = at[1];
        if (e == 'u') {
            long code = hex4(at + 2); /* checked by scan_string: 0..0xFFFF, not a surrogate */
            if (code < 0x80) *to++ = (char)code;
            else if (code < 0x800) {
                *to++ = (char)(0xC0 | (code >> 6));
                *to++ = (char)(0x80 | (code & 0x3F));
            } else {
                *to++ = (char)(0xE0 | (code >> 12));
                *to++ = (char)(0x80 | ((code >> 6) & 0x3F));
                *to++ = (char)(0x80 | (code & 0x3F));
            }
            at += 6;
            continue;
        }
        *to++ = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : (char)e;
        at += 2;
    }
    return to - out;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* How many of the 8 bytes at `at` are plain string bytes before the first that is not (a quote, a backslash or
 * a control character; a byte of 0x80 or above is plain): 8 when all are. The 8 bytes are or-ed into *seen
 * (whose high bits then tell whether a byte past ASCII may be among them). Each term of `ends` is the "some
 * byte is zero" (or "below 0x20") test of the bit-twiddling lore: every byte that counts is flagged, and a
 * borrow flags more only toward the word's high end. Little-endian, that is after the first such byte, so
 * the count is exact; big-endian, a plain byte may be counted out too early, which only hands it to the
 * byte loop. */
static inline int plain_bytes(const unsigned char *at, uint64_t *seen) {
    uint64_t word;
    memcpy(&word, at, 8);
    *seen |= word;
    uint64_t quote = word ^ (ONES * '"'), backslash = word ^ (ONES * '\\');
    uint64_t ends = ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash) | ((word - ONES * 0x20) & ~word);
    ends &= HIGHS;
    if (ends == 0) return 8;
#if defined(__GNUC__) && PY_LITTLE_ENDIAN
    return __builtin_ctzll(ends) >> 3;
#elif defined(__GNUC__)
    return __builtin_clzll(ends) >> 3;
#else
    return 0; /* the bytes one at a time, then */
#endif
}

/* The JSON string at the scan: 1 and past it, with *value its str when value is not NULL; 0 for a form the
 * scan leaves to msgspec (a control character, a bad or surrogate escape, invalid UTF-8, no end); -1 on an
 * error. A raw lead byte never meets an escape's bytes as its continuation (they start with an ASCII or a
 * lead byte), so decoding the unescaped bytes checks the raw ones exactly. */
static int scan_string(Scan *scan, PyObject **value) {
    if (scan->at >= scan->end || *scan->at != '"') return 0;
    const unsigned char *start = (const unsigned char *)scan->at + 1, *at = start;
    const unsigned char *end = (const unsigned char *)scan->end;
    int escaped = 0, wide = 0;
    uint64_t seen = 0; /* bytes read eight at a time, or-ed: a high bit set may be a byte past ASCII */
    for (;;) {
        /* plain bytes eight at a time: most strings (ids, text) have no escape */
        for (int plain = 8; plain == 8 && end - at >= 8; at += plain) plain = plain_bytes(at, &seen);
        if (at >= end || *at < 0x20) return 0;
        if (*at == '"') break;
        if (*at == '\\') {
            if (end - at < 2) return 0;
            unsigned char e = at[1];
            if (e == 'u') {
                long code = end - at >= 6 ? hex4(at + 2) : -1;
                if (code < 0 || (code >= 0xD800 && code <= 0xDFFF)) return 0;
                at += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't')
                at += 2;
            else return 0;
            escaped = 1;
            continue;
        }
        wide |= *at >= 0x80;
        at++;
    }
    wide |= (seen & HIGHS) != 0; /* at worst a needless check of the UTF-8 */
    scan->at = (const char *)at + 1;
    Py_ssize_t size = at - start;
    if (value == NULL && !wide) return 1;
    char stack[512], *bytes = (char *)start, *heap = NULL;
    if (escaped) {
        bytes = size <= (Py_ssize_t)sizeof stack ? stack : (heap = PyMem_Malloc(size));
        if (bytes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        size = unescape(start, size, bytes);
    }
    PyObject *text = PyUnicode_DecodeUTF8(bytes, size, NULL);
    PyMem_Free(heap);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (value != NULL) *value = text;
    else Py_DECREF(text);
    return 1;
}

/* A value the skim does not read: a string, null, true or false (1); 0 for anything else; -1 on an error. */
static int scan_unread(Scan *scan) {
    if (scan->at < scan->end && *scan->at == '"') return scan_string(scan, NULL);
    return LITERAL(scan, "null") || LITERAL(scan, "true") || LITERAL(scan, "false");
}

/* The key at the scan, followed by its colon, when it is one of `names` (as written, no escape): its position
 * and the scan past the colon; else -1. */
static int scan_key(Scan *scan, const char *const *names, int count) {
    if (scan->at >= scan->end || *scan->at != '"') return -1;
    const char *start = scan->at + 1, *close = memchr(start, '"', scan->end - start);
    if (close == NULL || scan->end - close < 2 || close[1] != ':') return -1;
    size_t size = close - start;
    for (int k = 0; k < count; k++) {
        if (strlen(names[k]) == size && memcmp(names[k], start, size) == 0) {
            scan->at = close + 2;
            return k;
        }
    }
    return -1;
}

/* A natural number (a block index, a token count): 0, or up to 18 digits without a leading zero (well inside
 * msgspec's int64 bounds). */
static int scan_natural(Scan *scan, long long *number) {
    const char *at = scan->at;
    if (at >= scan->end || *at < '0' || *at > '9') return 0;
    long long value = 0;
    int digits = 0;
    do {
        value = value * 10 + (*at++ - '0');
    } while (value != 0 && at < scan->end && *at >= '0' && *at <= '9' && ++digits < 18);
    scan->at = at;
    *number = value;
    return 1;
}

/* A delta object: its LINE_* kind, with *text for LINE_TEXT and LINE_THINKING; -1 on an error. */
static int scan_delta(Scan *scan, PyObject **text) {
    int kind;
    const char *quiet_field;
    if (LITERAL(scan, "{\"type\":\"text_delta\",\"text\":")) kind = LINE_TEXT;
    else if (LITERAL(scan, "{\"type\":\"thinking_delta\",\"thinking\":")) kind = LINE_THINKING;
    else if (LITERAL(scan, "{\"type\":\"input_json_delta\"")) kind = LINE_QUIET, quiet_field = "partial_json";
    else if (LITERAL(scan, "{\"type\":\"signature_delta\"")) kind = LINE_QUIET, quiet_field = "signature";
    else return LINE_OTHER;
    int got;
    if (kind == LINE_QUIET)
        got = !LITERAL(scan, ",") ? 1 : scan_key(scan, &quiet_field, 1) == 0 ? scan_unread(scan) : 0;
    else got = scan_string(scan, text);
    return got <= 0 ? got : LITERAL(scan, "}") ? kind : LINE_OTHER;
}

/* What the scan read of a line besides its kind (new references, NULL where the line has none). */
typedef struct {
    long long index;     /* LINE_TEXT, LINE_THINKING, LINE_BLOCK_STOP: the block's */
    PyObject *text;      /* LINE_TEXT, LINE_THINKING: the delta's */
    PyObject *values[4]; /* LINE_THINKING_TOKENS, LINE_STATUS: estimated_tokens, estimated_tokens_delta, status,
                          * message */
} Scanned;

static void scanned_clear(Scanned *scanned) {
    Py_CLEAR(scanned->text);
    for (int k = 0; k < 4; k++) Py_CLEAR(scanned->values[k]);
}

/* The members of a content_block_delta event after its type: its delta's LINE_* kind, with the index and text. */
static int scan_delta_event(Scan *scan, Scanned *scanned) {
    static const char *const names[] = {"index", "delta"};
    int seen = 0, kind = LINE_OTHER;
    while (LITERAL(scan, ",")) {
        int key = scan_key(scan, names, 2);
        if (key < 0 || seen & (1 << key)) return LINE_OTHER;
        seen |= 1 << key;
        if (key == 0) {
            if (!scan_natural(scan, &scanned->index)) return LINE_OTHER;
        } else if ((kind = scan_delta(scan, &scanned->text)) <= 0) return kind;
    }
    return seen == 3 && LITERAL(scan, "}") ? kind : LINE_OTHER;
}

/* The members of a content_block_stop event after its type: its index (nothing else: _BlockStop has no other). */
static int scan_block_stop_event(Scan *scan, Scanned *scanned) {
    static const char *const names[] = {"index"};
    return LITERAL(scan, ",") && scan_key(scan, names, 1) == 0 && scan_natural(scan, &scanned->index) &&
                   LITERAL(scan, "}")
               ? LINE_BLOCK_STOP
               : LINE_OTHER;
}

/* A tool_use block as its start gives it, input still empty ({}): 1; 0 for anything else; -1 on an error. */
static int scan_tool_use_start(Scan *scan) {
    static const char *const names[] = {"id", "name", "input", "caller"};
    if (!LITERAL(scan, "{\"type\":\"tool_use\"")) return 0;
    int seen = 0;
    while (LITERAL(scan, ",")) {
        int key = scan_key(scan, names, 4);
        if (key < 0 || seen & (1 << key)) return 0;
        seen |= 1 << key;
        int got = key == 2 ? LITERAL(scan, "{}") : scan_unread(scan);
        if (got <= 0) return got;
    }
    return LITERAL(scan, "}");
}

/* The members of a content_block_start event after its type: LINE_QUIET for a tool_use block (decode_typed
 * does nothing with one: its call comes whole with the assistant line), LINE_OTHER for any other block. */
static int scan_block_start_event(Scan *scan) {
    static const char *const names[] = {"index", "content_block"};
    long long index;
    int seen = 0;
    while (LITERAL(scan, ",")) {
        int key = scan_key(scan, names, 2);
        if (key < 0 || seen & (1 << key)) return LINE_OTHER;
        seen |= 1 << key;
        int got = key == 0 ? scan_natural(scan, &index) : scan_tool_use_start(scan);
        if (got <= 0) return got;
    }
    return seen == 3 && LITERAL(scan, "}") ? LINE_QUIET : LINE_OTHER;
}

/* The event object of a stream_event line: its LINE_* kind. */
static int scan_event(Scan *scan, Scanned *scanned) {
    if (LITERAL(scan, "{\"type\":\"content_block_delta\"")) return scan_delta_event(scan, scanned);
    if (LITERAL(scan, "{\"type\":\"content_block_stop\"")) return scan_block_stop_event(scan, scanned);
    if (LITERAL(scan, "{\"type\":\"content_block_start\"")) return scan_block_start_event(scan);
    return LITERAL(scan, "{\"type\":\"message_stop\"}") ? LINE_MESSAGE_STOP : LINE_OTHER;
}

/* The members of a stream_event line after its type: its event's LINE_* kind; -1 on an error. */
static int scan_stream_line(Scan *scan, Scanned *scanned) {
    static const char *const names[] = {"event", "session_id", "parent_tool_use_id", "uuid",
                                        "ttft_ms", "api_message_id", "thinking_display"};
    int seen = 0, kind = LINE_OTHER;
    while (LITERAL(scan, ",")) {
        int key = scan_key(scan, names, 7);
        if (key < 0 || seen & (1 << key)) return LINE_OTHER;
        seen |= 1 << key;
        int got = key == 0 ? (kind = scan_event(scan, scanned)) : scan_unread(scan);
        if (got <= 0) return got;
    }
    return (seen & 1) && LITERAL(scan, "}") ? kind : LINE_OTHER;
}

/* A value kept as it is: a string, an integer of up to 18 digits, null, true or false, as msgspec decodes it
 * for a field of any type. 1 with *value (a new reference), 0 for any other value, -1 on an error. */
static int scan_value(Scan *scan, PyObject **value) {
    if (scan->at < scan->end && *scan->at == '"') return scan_string(scan, value);
    PyObject *constant = LITERAL(scan, "null") ? Py_None : LITERAL(scan, "true") ? Py_True : LITERAL(scan, "false") ? Py_False : NULL;
    if (constant != NULL) {
        *value = Py_NewRef(constant);
        return 1;
    }
    int negative = LITERAL(scan, "-");
    long long number;
    if (!scan_natural(scan, &number)) return 0;
    *value = PyLong_FromLongLong(negative ? -number : number);
    return *value == NULL ? -1 : 1;
}

/* The members of a thinking_tokens or status system line after its subtype: `kind` with the values _SystemLine
 * holds, LINE_OTHER for any other form, -1 on an error. */
static int scan_system_line(Scan *scan, int kind, Scanned *scanned) {
    /* the four values first (in _SystemLine.data's order), then the stamps, which are not read */
    static const char *const names[] = {"estimated_tokens", "estimated_tokens_delta", "status", "message",
                                        "session_id", "uuid"};
    int seen = 0;
    while (LITERAL(scan, ",")) {
        int key = scan_key(scan, names, 6);
        if (key < 0 || seen & (1 << key)) return LINE_OTHER;
        seen |= 1 << key;
        int got = key >= 4 ? scan_unread(scan) : scan_value(scan, &scanned->values[key]);
        if (got <= 0) return got;
        /* status and message are typed str or None: any other kind is msgspec's to refuse */
        if ((key == 2 || key == 3) && scanned->values[key] != Py_None && !PyUnicode_Check(scanned->values[key]))
            return LINE_OTHER;
    }
    return LITERAL(scan, "}") ? kind : LINE_OTHER;
}

/* A line in the compact form Claude Code writes: its LINE_* kind, with what it carries in *scanned (which the
 * caller clears, whatever the answer); -1 on an error. */
static int scan_line(const char *bytes, Py_ssize_t size, Scanned *scanned) {
    Scan scan = {bytes, bytes + size};
    int kind = LITERAL(&scan, "{\"type\":\"stream_event\"") ? scan_stream_line(&scan, scanned)
               : LITERAL(&scan, "{\"type\":\"system\",\"subtype\":\"thinking_tokens\"")
                   ? scan_system_line(&scan, LINE_THINKING_TOKENS, scanned)
               : LITERAL(&scan, "{\"type\":\"system\",\"subtype\":\"status\"") ? scan_system_line(&scan, LINE_STATUS, scanned)
                                                                                 : LINE_OTHER;
    return kind > 0 && scan.at != scan.end ? LINE_OTHER : kind;
}

/* -- what the lines do -------------------------------------------------------------------------------------- */

/* `event` stamped and queued as EventDecoder._stamp does once started: 0, or -1 on an error. */
static int queue_event(Skim *skim, PyObject *event) {
    if (stamp_queued(event, skim->session, &skim->next_seq, skim->ts, skim->kinds[C_PROTOCOL], skim->out) < 0)
        return -1;
    skim->queued++;
    return 0;
}

/* The delta event of `run` (a kit._Run) for `text`, stamped and queued as EventDecoder.delta does: 0, or -1
 * on an error. */
static int queue_delta(Skim *skim, PyObject *run, PyObject *text, int reasoning) {
    PyObject *parts = NULL, *run_id = NULL, *role = NULL, *event = NULL;
    int outcome = -1;
    if (SET(run, A_RUN_TS, Py_None) < 0 || (parts = GET(run, A_PARTS)) == NULL || PyList_Append(parts, text) < 0 ||
        (run_id = GET(run, A_RUN_ID)) == NULL)
        goto done;
    if (reasoning) {
        PyObject *values[2] = {run_id, text};
        event = PyObject_Vectorcall(skim->kinds[C_REASONING_DELTA], values, 0, reasoning_delta_names);
    } else {
        if ((role = GET(run, A_ROLE)) == NULL) goto done;
        PyObject *values[3] = {run_id, role, text};
        event = PyObject_Vectorcall(skim->kinds[C_MESSAGE_DELTA], values, 0, message_delta_names);
    }
    if (event != NULL) outcome = queue_event(skim, event);
done:
    Py_XDECREF(parts);
    Py_XDECREF(run_id);
    Py_XDECREF(role);
    Py_XDECREF(event);
    return outcome;
}

/* A delta of block `index` with `text`, once the state is read: 1 when queued (it continues an open run) or
 * when there is nothing to do, 0 when decode_typed's own steps must read it, -1 on an error. */
static int skim_delta(Skim *skim, PyObject *index, PyObject *text, int reasoning) {
    PyObject *run = NULL;
    int found = open_run_of(skim, index, text, reasoning, &run);
    if (found == 1) {
        found = queue_delta(skim, run, text, reasoning) < 0 ? -1 : 1;
        Py_DECREF(run);
    }
    return found == 2 ? 1 : found;
}

/* A content_block_stop of the current message's block `number`: one whose run is closed (or no block) is only
 * forgotten (1); closing an open run is decode_typed's (0). -1 on an error. */
static int skim_block_stop(Skim *skim, long long number) {
    if (skim->blocks == NULL || !PyDict_Check(skim->named)) return 0;
    PyObject *index = PyLong_FromLongLong(number), *run_key = NULL;
    if (index == NULL) return -1;
    int outcome = -1;
    PyObject *block = PyDict_GetItemWithError(skim->blocks, index);
    if (block == NULL || !PyTuple_CheckExact(block) || PyTuple_GET_SIZE(block) != 2) {
        outcome = PyErr_Occurred() ? -1 : block == NULL;
        goto done;
    }
    int reasoning = PyObject_RichCompareBool(PyTuple_GET_ITEM(block, 0), skim->kinds[C_THINKING], Py_EQ);
    if (reasoning < 0 || (run_key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, PyTuple_GET_ITEM(block, 1))) == NULL)
        goto done;
    int open = PyDict_Contains(skim->named, run_key);
    outcome = open < 0 ? -1 : open ? 0 : PyDict_DelItem(skim->blocks, index) < 0 ? -1 : 1;
done:
    Py_DECREF(index);
    Py_XDECREF(run_key);
    return outcome;
}

/* A message_stop: the current message is over (1); with its usage still to go out, decode_typed's (0). -1 on
 * an error. */
static int skim_message_stop(Skim *skim, PyObject *decoder) {
    PyObject *usage = GET(decoder, A_USAGE);
    if (usage == NULL) return -1;
    int pending = usage != Py_None;
    Py_DECREF(usage);
    if (pending || !PyDict_Check(skim->streams)) return 0;
    int named = PyObject_IsTrue(skim->current); /* _streams.pop(_current or "", None) */
    if (named < 0) return -1;
    PyObject *key = named ? skim->current : empty_text;
    int present = PyDict_Contains(skim->streams, key);
    if (present < 0 || (present && PyDict_DelItem(skim->streams, key) < 0) || SET(decoder, A_CURRENT, Py_None) < 0)
        return -1;
    Py_SETREF(skim->current, Py_NewRef(Py_None));
    Py_CLEAR(skim->blocks);
    return 1;
}

/* The event of a thinking_tokens line (its data as _SystemLine.data gives it) or of a status line, as
 * decode_typed makes them: a new reference, or NULL with an exception set. */
static PyObject *system_event(Skim *skim, int kind, PyObject *const *values) {
    if (kind == LINE_STATUS) {
        PyObject *status = values[2], *message = values[3];
        int with_message = message != NULL && PyUnicode_Check(message);
        PyObject *arguments[2] = {
            status != NULL && PyUnicode_Check(status) && PyUnicode_GET_LENGTH(status) > 0 ? status : idle_text, message};
        return PyObject_Vectorcall(skim->kinds[C_STATUS], arguments, 0, status_names[with_message]);
    }
    PyObject *data = PyDict_New(), *event = NULL;
    if (data == NULL) return NULL;
    for (int k = 0; k < 4; k++) {
        if (values[k] != NULL && PyDict_SetItem(data, thinking_tokens_keys[k], values[k]) < 0) goto done;
    }
    PyObject *arguments[2] = {skim->kinds[C_THINKING_TOKENS], data};
    event = PyObject_Vectorcall(skim->kinds[C_GENERIC_EVENT], arguments, 0, generic_event_names);
done:
    Py_DECREF(data);
    return event;
}

/* A system line's event, emitted as EventDecoder.emit does once started, with nothing lost on the line and no
 * chunk() run to close first (1): the tally sees it, then it is stamped and queued. Else decode_typed's (0). */
static int skim_system_line(Skim *skim, int kind, PyObject *const *values) {
    if (!skim->inline_stamps || skim->tally_add == NULL) return 0;
    PyObject *event = system_event(skim, kind, values), *added = NULL;
    int outcome = event != NULL && (added = PyObject_CallOneArg(skim->tally_add, event)) != NULL &&
                          queue_event(skim, event) == 0
                      ? 1
                      : -1;
    Py_XDECREF(added);
    Py_XDECREF(event);
    return outcome;
}

/* A scanned line read as decode_typed reads it (1), or left to decode_typed's own steps (0); -1 on an error. */
static int skim_scanned(Skim *skim, PyObject *decoder, int kind, Scanned *scanned) {
    if (kind == LINE_QUIET) return 1;
    if (skim_ready(skim, decoder) < 0) return -1;
    if (kind == LINE_BLOCK_STOP) return skim_block_stop(skim, scanned->index);
    if (kind == LINE_MESSAGE_STOP) return skim_message_stop(skim, decoder);
    if (kind == LINE_THINKING_TOKENS || kind == LINE_STATUS) return skim_system_line(skim, kind, scanned->values);
    PyObject *index = PyLong_FromLongLong(scanned->index);
    if (index == NULL) return -1;
    int found = skim_delta(skim, index, scanned->text, kind == LINE_THINKING);
    Py_DECREF(index);
    return found;
}

/* A line msgspec typed: a delta read as skim_scanned reads one; any other line is decode_typed's (0). */
static int skim_typed(Skim *skim, PyObject *decoder, PyObject *line) {
    PyObject *index = NULL, *text = NULL;
    int kind = typed_delta(skim, line, &index, &text), found = kind == LINE_QUIET ? 1 : kind < 0 ? -1 : 0;
    if (kind == LINE_TEXT || kind == LINE_THINKING)
        found = skim_ready(skim, decoder) < 0 ? -1 : skim_delta(skim, index, text, kind == LINE_THINKING);
    Py_XDECREF(index);
    Py_XDECREF(text);
    return found;
}

/* The line a skim starts at (its arguments checked: kinds, a tuple of `kinds` items; decoder; lines, a list;
 * index, from 0 to len(lines); decode), or -1 with an exception set. */
static Py_ssize_t skim_start(const char *usage, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t kinds) {
    if (nargs != 5 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != kinds || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[3]);
    if (index == -1 && PyErr_Occurred()) return -1;
    if (index < 0 || index > PyList_GET_SIZE(args[2])) {
        PyErr_Format(PyExc_IndexError, "%s: index %zd is not one of the lines'", usage, index);
        return -1;
    }
    return index;
}

PyDoc_STRVAR(claude_skim_doc,
             "claude_skim(kinds, decoder, lines, index, decode) -> (index, line)\n\n"
             "ClaudeDecoder.typed_skim: reads the lines from lines[index] on that need no Python step, as "
             "decode_typed would, and stops at the first other one: its index and the line typed (kinds[9] "
             "when decode refused it), or (len(lines), None). Those lines: a delta of an open run or one that "
             "gives no event, a tool_use block's start, the stop of a block whose run is closed, a message's "
             "stop once its usage is out and, once the turn is under way, a thinking_tokens or status system "
             "line. Lines in the compact form Claude Code writes are read without decode.");

static PyObject *claude_skim(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t index = skim_start("claude_skim(kinds, decoder, lines, index, decode)", args, nargs, N_CLAUDE);
    if (index < 0) return NULL;
    PyObject *decoder = args[1], *lines = args[2], *decode = args[4], *answer = NULL;
    Skim skim = {.queued = 0};
    for (int k = 0; k < N_CLAUDE; k++) skim.kinds[k] = PyTuple_GET_ITEM(args[0], k);
    for (; index < PyList_GET_SIZE(lines); index++) {
        PyObject *data = PyList_GET_ITEM(lines, index), *line = NULL;
        Scanned scanned = {.text = NULL};
        /* an exact bytes line is never a LongLine: decode is the typed decoder itself for it */
        int kind = PyBytes_CheckExact(data) ? scan_line(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), &scanned)
                                            : LINE_OTHER;
        int found = kind <= 0 ? kind : skim_scanned(&skim, decoder, kind, &scanned);
        scanned_clear(&scanned);
        if (found == 0) { /* not scanned, or a line decode_typed reads: msgspec types it */
            Py_INCREF(data);
            line = PyObject_CallOneArg(decode, data);
            Py_DECREF(data);
            if (line == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_Exception)) goto done;
                PyErr_Clear(); /* not one of the common shapes: the careful path reads it or says why not */
                answer = Py_BuildValue("nO", index, skim.kinds[C_UNDECODED]);
                goto done;
            }
            if (kind == LINE_OTHER) found = skim_typed(&skim, decoder, line);
        }
        if (found == 0) answer = Py_BuildValue("nO", index, line);
        Py_XDECREF(line);
        if (found <= 0) goto done;
    }
    answer = Py_BuildValue("nO", index, Py_None);
done:
    if (skim_finish(&skim, decoder) < 0) Py_CLEAR(answer);
    skim_clear(&skim);
    return answer;
}

/* ---- the Gemini dialect: one more delta of the open text run, a tool call or result ----------------------------
 * Most lines of a Gemini CLI stream are the answer's chunks: {"type":"message","timestamp":…,"role":"assistant",
 * "content":…,"delta":true}. Written so (no whitespace, keys in that order, a canonical timestamp, a content
 * string scan_string reads) and read while the reply's text run is open, each is the delta decode_typed would
 * make of it. Any other line goes to msgspec; a tool_use or tool_result line it types, read while no run is open,
 * is the one event decode_typed would make of it; the rest go to decode_typed, as before. */

enum {
    G_RUN, G_MESSAGE_DELTA, G_UNDECODED, G_TOOL_USE_LINE, G_TOOL_RESULT_LINE, G_TOOL_PAIRS, G_TOOL_CALL, G_TOOL_RESULT,
    G_TALLY, N_GEMINI
};
/* Tool events' keyword names (the Gemini and Codex skims'), and texts they take */
static PyObject *tool_call_names, *tool_progress_names, *tool_result_names[2]; /* [1]: with the error */
static PyObject *tool_result_bare_names;                                       /* without the output */
static PyObject *zero, *unknown_text, *declined_text;

/* Whether `s` is "YYYY-MM-DDTHH:MM:SS.mmmZ" of a real date, time and year after 0: a stamp kit._iso_stamp
 * passes through unparsed (what it parses instead, the skim leaves to it). */
static int canonical_stamp(const char *s, Py_ssize_t size) {
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";
    if (size != (Py_ssize_t)sizeof shape - 1) return 0;
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        if (shape[i] == 'd' ? !is_digit(s[i]) : s[i] != shape[i]) return 0;
    }
#define DIGITS2(at) ((s[at] - '0') * 10 + (s[(at) + 1] - '0'))
    int year = DIGITS2(0) * 100 + DIGITS2(2), month = DIGITS2(5), day = DIGITS2(8);
    if (year < 1 || month < 1 || month > 12 || day < 1 || DIGITS2(11) > 23 || DIGITS2(14) > 59 || DIGITS2(17) > 59)
        return 0;
#undef DIGITS2
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return day <= days[month - 1] + (month == 2 && leap);
}

/* A chunk of the answer in the compact form: 1 with *ts and *text (new references); 0 for any other line; -1 on
 * an error. */
static int scan_gemini_chunk(const char *bytes, Py_ssize_t size, PyObject **ts, PyObject **text) {
    Scan scan = {bytes, bytes + size};
    if (!LITERAL(&scan, "{\"type\":\"message\",\"timestamp\":\"")) return 0;
    const char *stamp = scan.at;
    if (scan.end - stamp < 25 || !canonical_stamp(stamp, 24) || stamp[24] != '"') return 0;
    scan.at += 25;
    if (!LITERAL(&scan, ",\"role\":\"assistant\",\"content\":")) return 0;
    int found = scan_string(&scan, text);
    if (found <= 0) return found;
    if (!LITERAL(&scan, ",\"delta\":true}") || scan.at != scan.end) {
        Py_CLEAR(*text);
        return 0;
    }
    if ((*ts = PyUnicode_FromStringAndSize(stamp, 24)) == NULL) {
        Py_CLEAR(*text);
        return -1;
    }
    return 1;
}

/* What the skim reads of a decoder once per call: for chunks at the first compact line, for tool lines at the
 * first one. A call reads one kind or the other: chunks need their run open, tool lines none. */
typedef struct {
    PyObject *run, *parts, *run_id, *role, *answer, *sequencer, *session, *out, *next_seq, *open, *tally;
    PyObject *last_ts; /* the last line's time: the decoder's line_ts (and the run's ts), written back at the end */
    int usable;        /* the decoder is as decode_typed needs it for a chunk to be a plain delta */
    int ready;
    int tools_usable; /* ... and for a tool line to be one tool event, stamped straight */
    int tools_ready;
    Py_ssize_t chunks, tools; /* how many of each were queued */
} GeminiSkim;

static void gemini_clear(GeminiSkim *skim) {
    PyObject **held[] = {&skim->run,      &skim->parts,    &skim->run_id, &skim->role,
                         &skim->answer,   &skim->sequencer, &skim->session, &skim->out,
                         &skim->next_seq, &skim->open,     &skim->tally,  &skim->last_ts};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) Py_CLEAR(*held[i]);
}

/* The decoder's queue and sequencer, read by the first path that needs them: 0, or -1. */
static int gemini_stamping(GeminiSkim *skim, PyObject *decoder) {
    if (skim->sequencer != NULL) return 0;
    return (skim->out = GET(decoder, A_OUT)) == NULL || (skim->sequencer = GET(decoder, A_SEQUENCER)) == NULL ||
                   (skim->session = sequencer_field(skim->sequencer, F_SESSION_ID)) == NULL ||
                   (skim->next_seq = sequencer_field(skim->sequencer, F_NEXT_SEQ)) == NULL
               ? -1
               : 0;
}

/* Whether attribute `a` of `obj` is true (1), false (0), or -1 on an error. */
static int attr_truth(PyObject *obj, int a) {
    PyObject *value = GET(obj, a);
    if (value == NULL) return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* The open calls (a new reference in *open) of a decoder that holds no error line, has no delta run open, has
 * started its turn with no field lost and keeps its calls in a ToolPairs (`pairs`): 1. 0 when it is not so (what
 * emits a tool's event would then do more than stamp it); -1 on an error. */
static int idle_tool_pairs(PyObject *decoder, PyObject *pairs, PyObject **open) {
    PyObject *held = GET(decoder, A_HELD);
    if (held == NULL) return -1;
    int idle = held == Py_None;
    Py_DECREF(held);
    PyObject *run = idle ? GET(decoder, A_RUN) : NULL;
    if (idle && run == NULL) return -1;
    int no_run = run == Py_None;
    Py_XDECREF(run);
    int started = no_run ? attr_truth(decoder, A_STARTED) : 0;
    int lost = started > 0 ? attr_truth(decoder, A_LOST) : 1;
    if (started < 0 || lost < 0) return -1;
    if (!started || lost) return 0;
    PyObject *tools = GET(decoder, A_TOOLS);
    if (tools == NULL) return -1;
    if (Py_TYPE(tools) == (PyTypeObject *)pairs) *open = GET(tools, A_OPEN);
    Py_DECREF(tools);
    if (*open == NULL) return PyErr_Occurred() ? -1 : 0;
    return 1;
}

/* ToolPairs.finished(id, None) on its open calls (an exact dict): the name of the call `id` answers ("unknown"
 * for one it does not know or that had none), that call forgotten. A new reference, or NULL on an error. */
static PyObject *finished_call(PyObject *open, PyObject *id) {
    PyObject *known = Py_XNewRef(PyDict_GetItemWithError(open, id)); /* popped, then asked whether it is true */
    if (known == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(unknown_text);
    int named = PyDict_DelItem(open, id) < 0 ? -1 : PyObject_IsTrue(known);
    PyObject *name = named < 0 ? NULL : Py_NewRef(named ? known : unknown_text);
    Py_DECREF(known);
    return name;
}

/* Usable when no error line is held, the reply is under way (_replied does nothing), the turn is started with
 * no field lost, and the open run is the assistant's text: then chunk() adds to that run. 0, or -1. */
static int gemini_ready(GeminiSkim *skim, PyObject *decoder, PyObject *const *kinds) {
    skim->ready = 1;
    PyObject *held = GET(decoder, A_HELD), *reasoning = NULL;
    if (held == NULL) return -1;
    int idle = held == Py_None;
    Py_DECREF(held);
    int in_reply = idle ? attr_truth(decoder, A_IN_REPLY) : 0;
    int started = in_reply > 0 ? attr_truth(decoder, A_STARTED) : 0;
    int lost = started > 0 ? attr_truth(decoder, A_LOST) : 1;
    if (in_reply < 0 || started < 0 || lost < 0) return -1;
    if (!started || lost || (skim->run = GET(decoder, A_RUN)) == NULL) return PyErr_Occurred() ? -1 : 0;
    if (Py_TYPE(skim->run) != (PyTypeObject *)kinds[G_RUN]) return 0;
    if ((reasoning = GET(skim->run, A_REASONING)) == NULL || (skim->role = GET(skim->run, A_ROLE)) == NULL) {
        Py_XDECREF(reasoning);
        return -1;
    }
    int text_run = PyObject_RichCompareBool(reasoning, Py_False, Py_EQ);
    Py_DECREF(reasoning);
    int assistants = text_run > 0 ? PyObject_RichCompareBool(skim->role, assistant_text, Py_EQ) : text_run;
    if (assistants <= 0) return assistants;
    if ((skim->parts = GET(skim->run, A_PARTS)) == NULL || (skim->run_id = GET(skim->run, A_RUN_ID)) == NULL ||
        (skim->answer = GET(decoder, A_ANSWER)) == NULL || gemini_stamping(skim, decoder) < 0)
        return -1;
    skim->usable = PyList_Check(skim->parts) && PyList_Check(skim->answer) && PyList_Check(skim->out);
    return 0;
}

/* A compact chunk: queued as decode_typed would (1), not when the decoder is not as the skim needs (0); -1 on an
 * error. */
static int gemini_chunk(GeminiSkim *skim, PyObject *decoder, PyObject *const *kinds, PyObject *ts, PyObject *text) {
    if (!skim->ready && gemini_ready(skim, decoder, kinds) < 0) return -1; /* no run is open after a tool line */
    if (!skim->usable) return 0;
    PyObject *values[3] = {skim->run_id, skim->role, text};
    PyObject *event = NULL;
    int outcome = -1;
    if (PyList_Append(skim->answer, text) < 0 || PyList_Append(skim->parts, text) < 0 ||
        (event = PyObject_Vectorcall(kinds[G_MESSAGE_DELTA], values, 0, message_delta_names)) == NULL ||
        stamp_queued(event, skim->session, &skim->next_seq, ts, NULL, skim->out) < 0)
        goto done;
    Py_XSETREF(skim->last_ts, Py_NewRef(ts));
    skim->chunks++;
    outcome = 1;
done:
    Py_XDECREF(event);
    return outcome;
}

/* Usable for a tool line as for a Codex command (idle_tool_pairs): then _tool_use and _tool_result emit its one
 * event straight, with no run to close first. 0, or -1. */
static int gemini_tools_ready(GeminiSkim *skim, PyObject *decoder, PyObject *const *kinds) {
    skim->tools_ready = 1;
    int idle = idle_tool_pairs(decoder, kinds[G_TOOL_PAIRS], &skim->open);
    if (idle <= 0) return idle;
    if ((skim->tally = GET(decoder, A_TALLY)) == NULL || gemini_stamping(skim, decoder) < 0) return -1;
    skim->tools_usable = PyDict_CheckExact(skim->open) && PyList_Check(skim->out);
    return 0;
}

/* _replied(by_the_model): a line of the model's after one that was not starts its next reply. 0, or -1. */
static int gemini_replied(PyObject *decoder, int by_the_model) {
    int in_reply = by_the_model ? attr_truth(decoder, A_IN_REPLY) : 1;
    if (in_reply < 0) return -1;
    if (!in_reply) {
        PyObject *replies = GET(decoder, A_REPLIES), *more = NULL;
        int failed = replies == NULL || (more = PyNumber_Add(replies, one)) == NULL || SET(decoder, A_REPLIES, more) < 0;
        Py_XDECREF(replies);
        Py_XDECREF(more);
        if (failed) return -1;
    }
    return SET(decoder, A_IN_REPLY, by_the_model ? Py_True : Py_False);
}

/* The event of a typed tool_use line (`use`) or tool_result line, as _tool_use or _tool_result makes it, their
 * steps on the decoder taken (a new reference); Py_None, nothing done, for a line they read another way (a call
 * with no id, whose id is made up; a result with an error); NULL on an error. */
static PyObject *gemini_tool_event(GeminiSkim *skim, PyObject *decoder, PyObject *const *kinds, PyObject *line,
                                   TypeSlots *slots, int use) {
    PyObject *id = slot_field(line, slots, F_TOOL_ID), *name = NULL, *other = NULL, *event = NULL;
    if (id == NULL || (other = slot_field(line, slots, use ? F_PARAMETERS : F_ERROR)) == NULL) goto done;
    if (!PyUnicode_CheckExact(id) || (use ? PyUnicode_GET_LENGTH(id) == 0 : other != Py_None)) {
        event = Py_NewRef(Py_None);
        goto done;
    }
    if (use) { /* _replied(True); _answer = []; tools.called(id, name); the call with parameters or {} */
        PyObject *answer = NULL, *arguments = NULL; /* an empty dict of the line's stands for itself */
        if ((name = slot_field(line, slots, F_TOOL_NAME)) != NULL && gemini_replied(decoder, 1) == 0 &&
            (answer = PyList_New(0)) != NULL && SET(decoder, A_ANSWER, answer) == 0 &&
            PyDict_SetItem(skim->open, id, name) == 0 &&
            (arguments = other == Py_None ? PyDict_New() : Py_NewRef(other)) != NULL) {
            PyObject *values[3] = {id, name, arguments};
            event = PyObject_Vectorcall(kinds[G_TOOL_CALL], values, 0, tool_call_names);
        }
        Py_XDECREF(answer);
        Py_XDECREF(arguments);
        goto done;
    }
    /* _replied(False); tools.finished(id, None); the result with its status and its output, if any */
    PyObject *status = NULL, *output = NULL;
    if (gemini_replied(decoder, 0) == 0 && (status = slot_field(line, slots, F_STATUS)) != NULL &&
        (output = slot_field(line, slots, F_OUTPUT)) != NULL && (name = finished_call(skim->open, id)) != NULL) {
        PyObject *values[4] = {id, name, status, output};
        event = PyObject_Vectorcall(kinds[G_TOOL_RESULT], values, 0,
                                    output == Py_None ? tool_result_bare_names : tool_result_names[0]);
    }
    Py_XDECREF(status);
    Py_XDECREF(output);
done:
    Py_XDECREF(id);
    Py_XDECREF(name);
    Py_XDECREF(other);
    return event;
}

/* A line msgspec typed: a tool_use or tool_result line's event queued as decode_typed queues it (1); 0 for any
 * other line and when the decoder is not as those steps assume; -1 on an error. */
static int gemini_tool(GeminiSkim *skim, PyObject *decoder, PyObject *const *kinds, PyObject *line) {
    int use = Py_TYPE(line) == (PyTypeObject *)kinds[G_TOOL_USE_LINE];
    /* (no chunk was read in this call: a run is open after one, and a tool line is then decode_typed's) */
    if (!use && Py_TYPE(line) != (PyTypeObject *)kinds[G_TOOL_RESULT_LINE]) return 0;
    if (!skim->tools_ready && gemini_tools_ready(skim, decoder, kinds) < 0) return -1;
    if (!skim->tools_usable) return 0;
    TypeSlots *slots = slots_of(Py_TYPE(line));
    PyObject *ts = slot_field(line, slots, F_TIMESTAMP), *event = NULL;
    if (ts == NULL) return -1;
    /* a time rfc3339 passes through as it is (any other is parsed there, or leaves the line's time unset) */
    int outcome = PyUnicode_CheckExact(ts) && PyUnicode_IS_ASCII(ts) &&
                  canonical_stamp((const char *)PyUnicode_1BYTE_DATA(ts), PyUnicode_GET_LENGTH(ts));
    if (outcome && (event = gemini_tool_event(skim, decoder, kinds, line, slots, use)) == NULL) outcome = -1;
    if (event == Py_None) outcome = 0;
    if (outcome > 0 && (tally_event(skim->tally, event, kinds[G_TALLY]) < 0 ||
                        stamp_queued(event, skim->session, &skim->next_seq, ts, NULL, skim->out) < 0))
        outcome = -1;
    if (outcome > 0) {
        Py_XSETREF(skim->last_ts, Py_NewRef(ts));
        skim->tools++;
    }
    Py_DECREF(ts);
    Py_XDECREF(event);
    return outcome;
}

/* What the lines read set on the decoder, its run and its sequencer, as decode_typed leaves them: 0, or -1. */
static int gemini_finish(GeminiSkim *skim, PyObject *decoder) {
    if (skim->chunks + skim->tools == 0) return 0;
    return SET(decoder, A_LINE_TS, skim->last_ts) < 0 ||
                   (skim->chunks > 0 && SET(skim->run, A_RUN_TS, skim->last_ts) < 0) ||
                   SET(decoder, A_LAST_FATAL, Py_None) < 0 || SET(decoder, A_TURN_ENDED, Py_False) < 0 ||
                   set_sequencer_field(skim->sequencer, F_NEXT_SEQ, skim->next_seq) < 0
               ? -1
               : 0;
}

PyDoc_STRVAR(gemini_skim_doc,
             "gemini_skim(kinds, decoder, lines, index, decode) -> (index, line)\n\n"
             "From lines[index] on, the chunks of the answer that continue the open text run, and the tool calls "
             "and results that need no run closed first, read as decode_typed reads them; then the index of the "
             "first other line with that line typed by decode (kinds' UNDECODED when decode refused it), or "
             "(len(lines), None).");

static PyObject *gemini_skim(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t index = skim_start("gemini_skim(kinds, decoder, lines, index, decode)", args, nargs, N_GEMINI);
    if (index < 0) return NULL;
    PyObject *const *kinds = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *decoder = args[1], *lines = args[2], *decode = args[4], *answer = NULL;
    GeminiSkim skim = {.chunks = 0};
    for (; index < PyList_GET_SIZE(lines); index++) {
        PyObject *data = PyList_GET_ITEM(lines, index), *ts = NULL, *text = NULL;
        /* an exact bytes line is never a LongLine: decode is the typed decoder itself for it */
        int found = PyBytes_CheckExact(data)
                        ? scan_gemini_chunk(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), &ts, &text)
                        : 0;
        if (found > 0) found = gemini_chunk(&skim, decoder, kinds, ts, text);
        Py_XDECREF(ts);
        Py_XDECREF(text);
        if (found < 0) goto done;
        if (found > 0) continue;
        Py_INCREF(data);
        PyObject *line = PyObject_CallOneArg(decode, data);
        Py_DECREF(data);
        if (line == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto done;
            PyErr_Clear(); /* not one of the common shapes: the careful path reads it or says why not */
            line = Py_NewRef(kinds[G_UNDECODED]);
        }
        found = gemini_tool(&skim, decoder, kinds, line);
        if (found != 0) {
            Py_DECREF(line);
            if (found < 0) goto done;
            continue;
        }
        answer = Py_BuildValue("nN", index, line);
        goto done;
    }
    answer = Py_BuildValue("nO", index, Py_None);
done:
    if (gemini_finish(&skim, decoder) < 0) Py_CLEAR(answer);
    gemini_clear(&skim);
    return answer;
}

/* ---- the Codex dialect: command items, messages and reasoning ------------------------------------------------
 * Most lines of a `codex exec --json` session are a command's: its item.started, its item.updated lines (the
 * output so far) and its item.completed; most others are a completed agent message or reasoning item. Typed by
 * msgspec as decode_typed has them, each becomes the events CodexDecoder._tool_events or _text_item makes of
 * it, tallied and stamped as EventDecoder._stamp does; any other line, and any line while the decoder is not in
 * the state those steps assume, goes to decode_typed. */

enum {
    X_STARTED, X_UPDATED, X_COMPLETED, X_COMMAND_ITEM, X_TOOL_PAIRS, X_TOOL_CALL, X_TOOL_PROGRESS, X_TOOL_RESULT,
    X_UNDECODED, X_TALLY, X_PROTOCOL, X_COMMAND, X_NEVER_FINISHED, X_MESSAGE_ITEM, X_REASONING_ITEM, X_MESSAGE,
    X_REASONING, N_CODEX
};
static PyObject *tool_status_text[4]; /* "denied", "cancelled", "success", "error" */

/* What the skim reads of a decoder once per call, at its first command line. */
typedef struct {
    PyObject *shown, *open, *texts, *named, *out, *tally, *sequencer, *session, *next_seq, *ts;
    PyObject *last_text; /* the last agent message's text: the decoder's _last_text, written back at the end */
    int usable; /* the decoder is as those steps assume: no error held, no delta run open, started, nothing lost */
    int ready;
    Py_ssize_t queued;
} CodexSkim;

static void codex_clear(CodexSkim *skim) {
    PyObject **held[] = {&skim->shown,   &skim->open,      &skim->texts,   &skim->named,    &skim->out,
                         &skim->tally,   &skim->sequencer, &skim->session, &skim->next_seq, &skim->ts,
                         &skim->last_text};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) Py_CLEAR(*held[i]);
}

static int codex_ready(CodexSkim *skim, PyObject *decoder, PyObject *const *kinds) {
    skim->ready = 1;
    int idle = idle_tool_pairs(decoder, kinds[X_TOOL_PAIRS], &skim->open);
    if (idle <= 0) return idle;
    if ((skim->shown = GET(decoder, A_SHOWN)) == NULL || (skim->texts = GET(decoder, A_TEXTS)) == NULL ||
        (skim->named = GET(decoder, A_NAMED)) == NULL || (skim->out = GET(decoder, A_OUT)) == NULL ||
        (skim->tally = GET(decoder, A_TALLY)) == NULL || (skim->sequencer = GET(decoder, A_SEQUENCER)) == NULL ||
        (skim->session = sequencer_field(skim->sequencer, F_SESSION_ID)) == NULL ||
        (skim->next_seq = sequencer_field(skim->sequencer, F_NEXT_SEQ)) == NULL || reading_time(decoder, &skim->ts) < 0)
        return -1;
    skim->usable = PyDict_CheckExact(skim->shown) && PyDict_CheckExact(skim->open) &&
                   PyDict_CheckExact(skim->texts) && PyDict_CheckExact(skim->named) && PyList_Check(skim->out);
    return 0;
}

/* `event` (a new reference, or NULL after an error, taken either way) tallied, stamped and queued. */
static int codex_queue(CodexSkim *skim, PyObject *const *kinds, PyObject *event) {
    if (event == NULL) return -1;
    int outcome = tally_event(skim->tally, event, kinds[X_TALLY]) < 0 ||
                          stamp_queued(event, skim->session, &skim->next_seq, skim->ts, kinds[X_PROTOCOL], skim->out) < 0
                      ? -1
                      : 0;
    Py_DECREF(event);
    if (outcome == 0) skim->queued++;
    return outcome;
}

/* The tool_result of a completed command, as _command_result and ToolPairs.finished make it (a new reference). */
static PyObject *command_result(CodexSkim *skim, PyObject *const *kinds, PyObject *item, TypeSlots *slots,
                                PyObject *id, PyObject *output) {
    PyObject *status = slot_field(item, slots, F_STATUS), *exit_code = NULL, *error = NULL, *name = NULL;
    PyObject *event = NULL;
    if (status == NULL || (exit_code = slot_field(item, slots, F_EXIT_CODE)) == NULL) goto done;
    int is_str = PyUnicode_Check(status);
    int outcome; /* an index into tool_status_text */
    if (is_str && PyUnicode_CompareWithASCIIString(status, "declined") == 0) {
        outcome = 0;
        error = Py_NewRef(declined_text);
    } else if (exit_code == Py_None) {
        outcome = 1;
        error = Py_NewRef(kinds[X_NEVER_FINISHED]);
    } else {
        int zero_code = PyObject_RichCompareBool(exit_code, zero, Py_EQ);
        if (zero_code < 0) goto done;
        int failed = is_str && PyUnicode_CompareWithASCIIString(status, "failed") == 0;
        outcome = zero_code && !failed ? 2 : 3;
        if (outcome == 3 && (error = PyUnicode_FromFormat("exit code %S", exit_code)) == NULL) goto done;
    }
    if ((name = finished_call(skim->open, id)) == NULL) goto done;
    PyObject *text = output != Py_None ? output : empty_text; /* output or "" */
    PyObject *values[5] = {id, name, tool_status_text[outcome], text, error};
    event = PyObject_Vectorcall(kinds[X_TOOL_RESULT], values, 0, tool_result_names[error != NULL]);
done:
    Py_XDECREF(status);
    Py_XDECREF(exit_code);
    Py_XDECREF(error);
    Py_XDECREF(name);
    return event;
}

/* A command item's line (`phase`: X_STARTED, X_UPDATED or X_COMPLETED): its events queued as _tool_events
 * queues them (1); 0 when decode_typed's own steps must read it; -1 on an error. */
static int codex_command(CodexSkim *skim, PyObject *decoder, PyObject *const *kinds, int phase, PyObject *item) {
    if (!skim->ready && codex_ready(skim, decoder, kinds) < 0) return -1;
    if (!skim->usable) return 0;
    TypeSlots *slots = slots_of(Py_TYPE(item));
    PyObject *id = slot_field(item, slots, F_ID), *output = NULL, *command = NULL, *arguments = NULL;
    PyObject *size = NULL;
    int outcome = -1;
    if (id == NULL || (output = slot_field(item, slots, F_AGGREGATED_OUTPUT)) == NULL) goto done;
    if (!PyUnicode_CheckExact(id) || PyUnicode_GET_LENGTH(id) == 0 || (output != Py_None && !PyUnicode_Check(output))) {
        outcome = 0; /* a call without an id gets a new one: ToolPairs.called's to make */
        goto done;
    }
    PyObject *shown = PyDict_GetItemWithError(skim->shown, id);
    Py_ssize_t already = 0;
    if (shown == NULL) {
        if (PyErr_Occurred() || (command = slot_field(item, slots, F_COMMAND)) == NULL ||
            (arguments = PyDict_New()) == NULL ||
            PyDict_SetItem(arguments, field_keys[F_COMMAND], command == Py_None ? empty_text : command) < 0 ||
            PyDict_SetItem(skim->shown, id, zero) < 0 || PyDict_SetItem(skim->open, id, kinds[X_COMMAND]) < 0)
            goto done;
        PyObject *values[3] = {id, kinds[X_COMMAND], arguments};
        if (codex_queue(skim, kinds, PyObject_Vectorcall(kinds[X_TOOL_CALL], values, 0, tool_call_names)) < 0)
            goto done;
    } else if (!PyLong_CheckExact(shown) || ((already = PyLong_AsSsize_t(shown)) == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        outcome = 0;
        goto done;
    }
    if (phase == X_UPDATED && output != Py_None && PyUnicode_GET_LENGTH(output) > 0 &&
        PyUnicode_GET_LENGTH(output) > already) {
        Py_ssize_t length = PyUnicode_GET_LENGTH(output);
        PyObject *content = PyUnicode_Substring(output, already, length);
        if (content == NULL) goto done;
        PyObject *values[2] = {id, content};
        int queued = codex_queue(skim, kinds, PyObject_Vectorcall(kinds[X_TOOL_PROGRESS], values, 0,
                                                                   tool_progress_names));
        Py_DECREF(content);
        if (queued < 0 || (size = PyLong_FromSsize_t(length)) == NULL || PyDict_SetItem(skim->shown, id, size) < 0)
            goto done;
    }
    if (phase == X_COMPLETED && (PyDict_DelItem(skim->shown, id) < 0 ||
                                 codex_queue(skim, kinds, command_result(skim, kinds, item, slots, id, output)) < 0))
        goto done;
    outcome = 1;
done:
    Py_XDECREF(id);
    Py_XDECREF(output);
    Py_XDECREF(command);
    Py_XDECREF(arguments);
    Py_XDECREF(size);
    return outcome;
}

/* A completed agent message or reasoning item: its complete event queued as _text_item and complete queue it
 * (1); 0 when decode_typed's own steps must read it; -1 on an error. */
static int codex_text(CodexSkim *skim, PyObject *decoder, PyObject *const *kinds, int reasoning, PyObject *item) {
    if (!skim->ready && codex_ready(skim, decoder, kinds) < 0) return -1;
    if (!skim->usable) return 0;
    TypeSlots *slots = slots_of(Py_TYPE(item));
    PyObject *id = slot_field(item, slots, F_ID), *text = NULL, *key = NULL, *run = NULL, *role = NULL;
    int outcome = -1;
    if (id == NULL || (text = slot_field(item, slots, F_TEXT)) == NULL) goto done;
    if (text == Py_None) Py_SETREF(text, Py_NewRef(empty_text)); /* item.text or "" */
    if (!PyUnicode_Check(text)) {
        outcome = 0;
        goto done;
    }
    PyObject *seen = PyDict_GetItemWithError(skim->texts, id); /* self._texts.pop(item_id, None), no KeyError made */
    if ((seen == NULL && PyErr_Occurred()) || (seen != NULL && PyDict_DelItem(skim->texts, id) < 0)) goto done;
    if (!reasoning) Py_XSETREF(skim->last_text, Py_NewRef(text));
    /* complete(): the named run of this id (its role), else a new one of the assistant's */
    if ((key = PyTuple_Pack(2, reasoning ? Py_True : Py_False, id)) == NULL) goto done;
    run = PyDict_GetItemWithError(skim->named, key);
    if (run == NULL && PyErr_Occurred()) goto done;
    Py_XINCREF(run);
    if (run != NULL && PyDict_DelItem(skim->named, key) < 0) goto done;
    if (reasoning) {
        PyObject *values[2] = {id, text};
        outcome = codex_queue(skim, kinds, PyObject_Vectorcall(kinds[X_REASONING], values, 0, reasoning_delta_names));
    } else {
        if ((role = run != NULL ? GET(run, A_ROLE) : Py_NewRef(assistant_text)) == NULL) goto done;
        PyObject *values[3] = {id, role, text};
        outcome = codex_queue(skim, kinds, PyObject_Vectorcall(kinds[X_MESSAGE], values, 0, message_delta_names));
    }
    if (outcome == 0) outcome = 1;
done:
    Py_XDECREF(id);
    Py_XDECREF(text);
    Py_XDECREF(key);
    Py_XDECREF(run);
    Py_XDECREF(role);
    return outcome;
}

/* What the steps set on the decoder and its sequencer, as they leave them: 0, or -1. */
static int codex_finish(CodexSkim *skim, PyObject *decoder) {
    if (skim->last_text != NULL && SET(decoder, A_LAST_TEXT, skim->last_text) < 0) return -1;
    if (skim->queued == 0) return 0;
    return SET(decoder, A_LAST_FATAL, Py_None) < 0 || SET(decoder, A_TURN_ENDED, Py_False) < 0 ||
                   set_sequencer_field(skim->sequencer, F_NEXT_SEQ, skim->next_seq) < 0
               ? -1
               : 0;
}

PyDoc_STRVAR(codex_skim_doc,
             "codex_skim(kinds, decoder, lines, index, decode) -> (index, line)\n\n"
             "From lines[index] on, the lines of command items and of completed agent messages and reasoning, read "
             "as decode_typed reads them; then the index of "
             "the first other line with that line typed by decode (kinds' UNDECODED when decode refused it), or "
             "(len(lines), None).");

static PyObject *codex_skim(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t index = skim_start("codex_skim(kinds, decoder, lines, index, decode)", args, nargs, N_CODEX);
    if (index < 0) return NULL;
    PyObject *const *kinds = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *decoder = args[1], *lines = args[2], *decode = args[4], *answer = NULL;
    CodexSkim skim = {.queued = 0};
    for (; index < PyList_GET_SIZE(lines); index++) {
        PyObject *data = Py_NewRef(PyList_GET_ITEM(lines, index));
        PyObject *line = PyObject_CallOneArg(decode, data);
        Py_DECREF(data);
        if (line == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto done;
            PyErr_Clear(); /* not one of the common shapes: the careful path reads it or says why not */
            answer = Py_BuildValue("nO", index, kinds[X_UNDECODED]);
            goto done;
        }
        PyObject *kind = (PyObject *)Py_TYPE(line);
        int phase = kind == kinds[X_STARTED] ? X_STARTED : kind == kinds[X_UPDATED] ? X_UPDATED
                  : kind == kinds[X_COMPLETED] ? X_COMPLETED : -1;
        int read = 0;
        if (phase >= 0) {
            PyObject *item = field(line, F_ITEM), *item_kind = item != NULL ? (PyObject *)Py_TYPE(item) : NULL;
            if (item == NULL) read = -1;
            else if (item_kind == kinds[X_COMMAND_ITEM]) read = codex_command(&skim, decoder, kinds, phase, item);
            else if (phase == X_COMPLETED && (item_kind == kinds[X_MESSAGE_ITEM] || item_kind == kinds[X_REASONING_ITEM]))
                read = codex_text(&skim, decoder, kinds, item_kind == kinds[X_REASONING_ITEM], item);
            Py_XDECREF(item);
        }
        if (read < 0) {
            Py_DECREF(line);
            goto done;
        }
        if (read == 0) {
            answer = Py_BuildValue("nN", index, line);
            goto done;
        }
        Py_DECREF(line);
    }
    answer = Py_BuildValue("nO", index, Py_None);
done:
    if (codex_finish(&skim, decoder) < 0) Py_CLEAR(answer);
    codex_clear(&skim);
    return answer;
}

/* ---- module ------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"count_lines", count_lines, METH_O, count_lines_doc},
    {"has_blank_line", has_blank_line, METH_O, has_blank_line_doc},
    {"split_lines", (PyCFunction)(void (*)(void))split_lines, METH_FASTCALL, split_lines_doc},
    {"is_timestamp", py_is_timestamp, METH_O, is_timestamp_doc},
    {"now_ts", now_ts, METH_NOARGS, now_ts_doc},
    {"events_timestamped", events_timestamped, METH_O, events_timestamped_doc},
    {"stamps_in_order", stamps_in_order, METH_VARARGS, stamps_in_order_doc},
    {"feed_turn", feed_turn, METH_VARARGS, feed_turn_doc},
    {"claude_deltas", (PyCFunction)(void (*)(void))claude_deltas, METH_FASTCALL, claude_deltas_doc},
    {"tally_add", (PyCFunction)(void (*)(void))tally_add, METH_FASTCALL, tally_add_doc},
    {"accept_plain", (PyCFunction)(void (*)(void))accept_plain, METH_FASTCALL, accept_plain_doc},
    {"stamp_line", (PyCFunction)(void (*)(void))stamp_line, METH_FASTCALL, stamp_line_doc},
    {"claude_skim", (PyCFunction)(void (*)(void))claude_skim, METH_FASTCALL, claude_skim_doc},
    {"gemini_skim", (PyCFunction)(void (*)(void))gemini_skim, METH_FASTCALL, gemini_skim_doc},
    {"codex_skim", (PyCFunction)(void (*)(void))codex_skim, METH_FASTCALL, codex_skim_doc},
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
    limit_key = PyUnicode_InternFromString("limit");
    if (result_key == NULL || pending_key == NULL || limit_key == NULL) return NULL;
    static struct {
        PyObject **key;
        const char *name;
    } names[] = {{&open_runs_key, "open_runs"}, {&open_calls_key, "open_calls"}, {&add_key, "add"},
                 {&assistant_text, "assistant"},  {&ellipsis_text, "\xe2\x80\xa6"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if ((*names[i].key = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
    }
    for (int a = 0; a < N_TALLY_ATTRS; a++) {
        if ((tally_attr_keys[a] = PyUnicode_InternFromString(tally_attr_names[a])) == NULL) return NULL;
    }
    for (int a = 0; a < N_ATTRS; a++) {
        if ((attr_keys[a] = PyUnicode_InternFromString(attr_names[a])) == NULL) return NULL;
    }
    if ((one = PyLong_FromLong(1)) == NULL || (now_ts_key = PyUnicode_InternFromString("now_ts")) == NULL)
        return NULL;
    message_delta_names = Py_BuildValue("(sss)", "message_id", "role", "content");
    reasoning_delta_names = Py_BuildValue("(ss)", "reasoning_id", "content");
    generic_event_names = Py_BuildValue("(ss)", "name", "data");
    status_names[0] = Py_BuildValue("(s)", "status");
    status_names[1] = Py_BuildValue("(ss)", "status", "message");
    idle_text = PyUnicode_InternFromString("idle");
    empty_text = PyUnicode_InternFromString("");
    if (message_delta_names == NULL || reasoning_delta_names == NULL || generic_event_names == NULL ||
        status_names[0] == NULL || status_names[1] == NULL || idle_text == NULL || empty_text == NULL)
        return NULL;
    tool_call_names = Py_BuildValue("(sss)", "call_id", "name", "arguments");
    tool_progress_names = Py_BuildValue("(ss)", "call_id", "content");
    tool_result_names[0] = Py_BuildValue("(ssss)", "call_id", "name", "status", "output");
    tool_result_names[1] = Py_BuildValue("(sssss)", "call_id", "name", "status", "output", "error");
    tool_result_bare_names = Py_BuildValue("(sss)", "call_id", "name", "status");
    zero = PyLong_FromLong(0);
    unknown_text = PyUnicode_InternFromString("unknown");
    declined_text = PyUnicode_InternFromString("the command was declined");
    static const char *statuses[4] = {"denied", "cancelled", "success", "error"};
    for (int k = 0; k < 4; k++) {
        if ((tool_status_text[k] = PyUnicode_InternFromString(statuses[k])) == NULL) return NULL;
    }
    if (tool_call_names == NULL || tool_progress_names == NULL || tool_result_names[0] == NULL ||
        tool_result_names[1] == NULL || tool_result_bare_names == NULL || zero == NULL || unknown_text == NULL || declined_text == NULL)
        return NULL;
    static const char *data_keys[4] = {"estimated_tokens", "estimated_tokens_delta", "status", "message"};
    for (int k = 0; k < 4; k++) {
        if ((thinking_tokens_keys[k] = PyUnicode_InternFromString(data_keys[k])) == NULL) return NULL;
    }
    PyObject *created = PyModule_Create(&module);
    /* Bumped with every change of a function's arguments or meaning: _accel.py uses a build of this file
     * only if it says the number it expects (an editable install keeps an old build until rebuilt). */
    if (created != NULL && PyModule_AddIntConstant(created, "INTERFACE", 12) < 0) Py_CLEAR(created);
    return created;
}
