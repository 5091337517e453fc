//! The coroutine of a stepped call's task (`toolsched._executor.stepped`): it steps the tool's coroutine as the
//! task would and hands how it ended to the executor in the task's last step, with no coroutine of the
//! executor's suspended while the tool waits.
//!
//! Its type is made by hand rather than by `#[pyclass]`, which always makes a type the cyclic collector
//! tracks: a stepper is not tracked, so it neither counts towards the collector's next pass nor is walked
//! by one. While thousands of calls wait, each is then what a bare task group's call is to the collector (a
//! task and the tool's coroutine) and its job (`python benches/gc_generations.py`). A stepper holds no
//! reference to itself or its task, and drops everything it holds as its call ends.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyTuple, PyType};

/// A stepper's memory: the object's header, then what it holds (each a strong reference or null).
#[repr(C)]
struct Stepper {
    ob_base: ffi::PyObject,
    // The batch's `SteppedCalls` (its `begin` and `end`) and the call's job, until the call ends.
    calls: *mut ffi::PyObject,
    job: *mut ffi::PyObject,
    // The tool's coroutine, from the first step until it ends.
    coroutine: *mut ffi::PyObject,
    // When the tool's coroutine began.
    started: Option<Instant>,
    // Whether the first step was taken.
    begun: bool,
    // Whether `coroutine` is the tail `calls.end` handed back (what is left of the call after its tool).
    tail: bool,
    // Whether a step (or `close`) is under way: code it runs that steps the stepper again is refused, as a
    // running coroutine refuses it, and what is under way is left as it was.
    running: bool,
    // The live steppers that hold something, linked (`abandon_closed`): the neighbours, and whether it is linked.
    prev: *mut Stepper,
    next: *mut Stepper,
    linked: bool,
    // The event loop of its batch (held until the stepper is released: a linked stepper's loop is live).
    event_loop: *mut ffi::PyObject,
}

/// The type, made once as the module is (`make_type`).
static TYPE: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(ptr::null_mut());

/// The first of the linked steppers (read and written with the interpreter attached only).
static LINKED: AtomicPtr<Stepper> = AtomicPtr::new(ptr::null_mut());

/// The event loops of the linked steppers, each with how many: what a full collection asks about (a few loops,
/// not every stepper; `abandon_closed`).
static LOOPS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// One more (`more`) or one fewer linked stepper of `event_loop`.
fn count_loop(event_loop: *mut ffi::PyObject, more: bool) {
    let mut loops = LOOPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = event_loop as usize;
    match loops.iter().position(|&(seen, _)| seen == key) {
        Some(at) if more => loops[at].1 += 1,
        Some(at) => {
            loops[at].1 -= 1;
            if loops[at].1 == 0 {
                loops.swap_remove(at);
            }
        }
        None if more => loops.push((key, 1)),
        None => {}
    }
}

/// Links a new stepper first (it holds its calls and job).
///
/// # Safety
/// `this` is a live stepper, not linked, and the interpreter is attached.
unsafe fn link(this: *mut Stepper) {
    unsafe {
        let first = LINKED.load(Ordering::Relaxed);
        (*this).prev = ptr::null_mut();
        (*this).next = first;
        if !first.is_null() {
            (*first).prev = this;
        }
        LINKED.store(this, Ordering::Relaxed);
        (*this).linked = true;
        count_loop((*this).event_loop, true);
    }
}

/// Unlinks a stepper that holds nothing any more (or is being deallocated).
fn unlink(stepper: &mut Stepper) {
    if !stepper.linked {
        return;
    }
    // SAFETY: linked steppers are live (each is unlinked before it is freed); the interpreter is attached.
    unsafe {
        if stepper.prev.is_null() {
            LINKED.store(stepper.next, Ordering::Relaxed);
        } else {
            (*stepper.prev).next = stepper.next;
        }
        if !stepper.next.is_null() {
            (*stepper.next).prev = stepper.prev;
        }
    }
    stepper.prev = ptr::null_mut();
    stepper.next = ptr::null_mut();
    stepper.linked = false;
    count_loop(stepper.event_loop, false);
}

/// `abandon_closed()`: drops what each stepper holds whose event loop is closed (it will never be stepped
/// again), ending nothing, as `dealloc` does; returns how many. What a stepper holds the cyclic collector cannot
/// see, so the task of a call left waiting on a closed event loop, its tool's coroutine and all they refer to
/// would otherwise be kept for ever; once dropped, the collector takes them as it takes `execute`'s coroutines.
/// Asks each event loop with live steppers whether it is closed (usually one loop, asked once); only when one
/// is are the steppers gone through. A stepper in a step is left alone.
#[pyfunction]
pub fn abandon_closed(py: Python<'_>) -> PyResult<usize> {
    let loops: Vec<usize> = {
        let loops = LOOPS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loops.iter().map(|&(event_loop, _)| event_loop).collect()
    };
    // Each held (a new reference) before any Python code runs: each linked stepper holds its loop.
    let held: Vec<Bound<'_, PyAny>> = loops
        .iter()
        .map(|&event_loop| unsafe { Bound::from_borrowed_ptr(py, event_loop as *mut ffi::PyObject) })
        .collect();
    let mut closed: Vec<usize> = Vec::new();
    for event_loop in &held {
        if event_loop.call_method0(intern!(py, "is_closed"))?.is_truthy()? {
            closed.push(event_loop.as_ptr() as usize);
        }
    }
    if closed.is_empty() {
        return Ok(0);
    }
    // Gathered first, with no Python code run (which could link or unlink steppers).
    let mut found: Vec<Bound<'_, PyAny>> = Vec::new();
    let mut node = LINKED.load(Ordering::Relaxed);
    while !node.is_null() {
        // SAFETY: linked steppers are live; each gathered one is held (a new reference) until the end.
        let stepper = unsafe { &*node };
        if !stepper.running && closed.contains(&(stepper.event_loop as usize)) {
            found.push(unsafe { Bound::from_borrowed_ptr(py, node.cast()) });
        }
        node = stepper.next;
    }
    let mut abandoned = 0;
    for stepper in &found {
        // SAFETY: `stepper` is a live stepper, held.
        if !unsafe { this(stepper.as_ptr()) }.running {
            release(py, stepper.as_ptr());
            abandoned += 1;
        }
    }
    drop(held);
    Ok(abandoned)
}

/// What was sent in for a step.
enum Sent<'py> {
    Value(Bound<'py, PyAny>),
    Thrown(Bound<'py, PyTuple>),
}

/// How a step ended: the coroutine yielded, or the call ended (its task's coroutine returns None).
enum Stepped<'py> {
    Yielded(Bound<'py, PyAny>),
    Ended,
}

/// `stepper(calls, job, event_loop)`: the coroutine of a stepped call's task. Its first step asks `calls.begin(job)` for
/// the tool's coroutine (None: the call does not run, and the task ends); once that coroutine ends, the step
/// that ended it calls `calls.end(job, output, error, milliseconds)`: what it returned or raised, and how
/// long it ran. `end` may hand back a tail, a coroutine for what is left of the call (its post hooks): the
/// stepper steps it next, as the rest of the task, and the task ends with it.
#[pyfunction]
pub fn stepper(
    py: Python<'_>,
    calls: &Bound<'_, PyAny>,
    job: &Bound<'_, PyAny>,
    event_loop: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let kind = TYPE.load(Ordering::Acquire);
    if kind.is_null() {
        return Err(PyRuntimeError::new_err("the stepper type is not made"));
    }
    // SAFETY: the interpreter is attached; `kind` is the type `make_type` made (never freed: the module keeps
    // a reference). `PyType_GenericAlloc` zeroes the object and takes a reference to the heap type, given back
    // in `dealloc`; every field is written before the object is handed out (an all-zero `Option<Instant>` is
    // not None).
    unsafe {
        let object = ffi::PyType_GenericAlloc(kind, 0);
        if object.is_null() {
            return Err(PyErr::fetch(py));
        }
        let this = object.cast::<Stepper>();
        ptr::addr_of_mut!((*this).calls).write(calls.clone().into_ptr());
        ptr::addr_of_mut!((*this).job).write(job.clone().into_ptr());
        ptr::addr_of_mut!((*this).coroutine).write(ptr::null_mut());
        ptr::addr_of_mut!((*this).started).write(None);
        ptr::addr_of_mut!((*this).begun).write(false);
        ptr::addr_of_mut!((*this).tail).write(false);
        ptr::addr_of_mut!((*this).running).write(false);
        ptr::addr_of_mut!((*this).prev).write(ptr::null_mut());
        ptr::addr_of_mut!((*this).next).write(ptr::null_mut());
        ptr::addr_of_mut!((*this).linked).write(false);
        ptr::addr_of_mut!((*this).event_loop).write(event_loop.clone().into_ptr());
        link(this);
        Ok(Bound::from_owned_ptr(py, object).unbind())
    }
}

/// Makes the type and adds it to `module` as `Stepper` (for `isinstance` and the stubs; it is made by `stepper`).
pub fn make_type(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    // Leaked on purpose: the type refers to these tables for as long as it lives, which is the process's life.
    let methods: &'static mut [ffi::PyMethodDef] = Box::leak(Box::new([
        ffi::PyMethodDef {
            ml_name: c"send".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer { PyCFunction: send },
            ml_flags: ffi::METH_O,
            ml_doc: c"A step sent a value: what the tool's coroutine yields; StopIteration once the call ended."
                .as_ptr(),
        },
        ffi::PyMethodDef {
            ml_name: c"throw".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer { PyCFunction: throw },
            ml_flags: ffi::METH_VARARGS,
            ml_doc: c"Throws into the tool's coroutine; before the call began, it never begins.".as_ptr(),
        },
        ffi::PyMethodDef {
            ml_name: c"close".as_ptr(),
            ml_meth: ffi::PyMethodDefPointer { PyCFunction: close },
            ml_flags: ffi::METH_NOARGS,
            ml_doc: c"Closes the tool's coroutine: a call that began ends with GeneratorExit.".as_ptr(),
        },
        ffi::PyMethodDef::zeroed(),
    ]));
    let getters: &'static mut [ffi::PyGetSetDef] = Box::leak(Box::new([
        getter(c"begun", get_begun),
        getter(c"cr_running", get_cr_running),
        getter(c"cr_suspended", get_cr_suspended),
        getter(c"cr_frame", get_cr_frame),
        getter(c"cr_await", get_cr_await),
        getter(c"cr_code", get_cr_code),
        getter(c"__name__", get_name),
        getter(c"__qualname__", get_qualname),
        ffi::PyGetSetDef::default(),
    ]));
    let slots: &'static mut [ffi::PyType_Slot] = Box::leak(Box::new([
        slot(ffi::Py_tp_dealloc, dealloc as *mut c_void),
        slot(ffi::Py_am_send, am_send as *mut c_void),
        slot(ffi::Py_am_await, itself as *mut c_void),
        slot(ffi::Py_tp_iter, itself as *mut c_void),
        slot(ffi::Py_tp_iternext, iternext as *mut c_void),
        slot(ffi::Py_tp_methods, methods.as_mut_ptr().cast()),
        slot(ffi::Py_tp_getset, getters.as_mut_ptr().cast()),
        slot(
            ffi::Py_tp_doc,
            c"The coroutine of a stepped call's task (made by `stepper`).".as_ptr() as *mut c_void,
        ),
        slot(0, ptr::null_mut()),
    ]));
    let spec: &'static mut ffi::PyType_Spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: c"toolsched._core.Stepper".as_ptr(),
        basicsize: c_int::try_from(std::mem::size_of::<Stepper>()).map_err(|_| PyTypeError::new_err("too large"))?,
        itemsize: 0,
        // No `Py_TPFLAGS_HAVE_GC`: not tracked by the cyclic collector. No `Py_TPFLAGS_BASETYPE`: no subclass
        // could add what the collector would have to see. Made by `stepper` only (a stepper made otherwise would
        // have nothing to step).
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION) as _,
        slots: slots.as_mut_ptr(),
    }));
    // SAFETY: the interpreter is attached; the spec and its tables live for the rest of the process.
    let kind = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(spec))? };
    let kind = kind.cast_into::<PyType>()?;
    TYPE.store(kind.as_type_ptr(), Ordering::Release);
    module.add("Stepper", kind)
}

fn slot(slot: c_int, pfunc: *mut c_void) -> ffi::PyType_Slot {
    ffi::PyType_Slot { slot, pfunc }
}

fn getter(name: &'static std::ffi::CStr, get: ffi::getter) -> ffi::PyGetSetDef {
    ffi::PyGetSetDef {
        name: name.as_ptr(),
        get: Some(get),
        set: None,
        doc: ptr::null(),
        closure: ptr::null_mut(),
    }
}

/// The stepper behind `object` (a `Stepper`: only its own slots and methods are given one).
///
/// # Safety
/// `object` is a live `Stepper` and the interpreter is attached.
unsafe fn this<'a>(object: *mut ffi::PyObject) -> &'a mut Stepper {
    unsafe { &mut *object.cast::<Stepper>() }
}

/// Takes a held reference out of its field (leaving null), as an owned `Bound`.
fn take<'py>(py: Python<'py>, field: &mut *mut ffi::PyObject) -> Option<Bound<'py, PyAny>> {
    let taken = std::mem::replace(field, ptr::null_mut());
    // SAFETY: a non-null field is a strong reference the stepper owned; it is handed to the `Bound` whole.
    (!taken.is_null()).then(|| unsafe { Bound::from_owned_ptr(py, taken) })
}

/// A new reference to a held object, if there is one.
fn held(py: Python<'_>, field: *mut ffi::PyObject) -> Option<Bound<'_, PyAny>> {
    // SAFETY: a non-null field is a live object the stepper holds a reference to.
    (!field.is_null()).then(|| unsafe { Bound::from_borrowed_ptr(py, field) })
}

/// Runs `body` as the stepper's step (or `close`): refused while another is under way (a tool stepping its own
/// task's coroutine), as a running coroutine refuses it.
fn exclusive<T>(object: *mut ffi::PyObject, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    // SAFETY: see `advance`; the flag is read and written with no reference into the stepper kept across `body`.
    let stepper = unsafe { this(object) };
    if stepper.running {
        return Err(PyValueError::new_err("coroutine already executing"));
    }
    stepper.running = true;
    let done = body();
    unsafe { this(object) }.running = false;
    done
}

/// One step: begins the call on the first, steps the tool's coroutine with what was sent, ends the call when
/// the coroutine ended.
fn advance<'py>(py: Python<'py>, object: *mut ffi::PyObject, sent: Sent<'py>) -> PyResult<Stepped<'py>> {
    exclusive(object, || advance_now(py, object, sent))
}

fn advance_now<'py>(py: Python<'py>, object: *mut ffi::PyObject, sent: Sent<'py>) -> PyResult<Stepped<'py>> {
    // SAFETY (each `this`): `object` is the live stepper whose slot or method runs, with the interpreter attached;
    // no reference into it is kept across a call into Python (which might step it again).
    let stepper = unsafe { this(object) };
    let coroutine = if stepper.begun {
        match held(py, stepper.coroutine) {
            Some(coroutine) => coroutine,
            None => {
                return match sent {
                    // Over already: as a finished coroutine, the exception is raised as it is.
                    Sent::Thrown(thrown) => Err(thrown_error(&thrown)?),
                    Sent::Value(_) => Err(PyRuntimeError::new_err("cannot reuse already awaited coroutine")),
                };
            }
        }
    } else {
        stepper.begun = true;
        if let Sent::Thrown(thrown) = &sent {
            // Thrown in before the call began: it never begins, and the exception ends the task.
            release(py, object);
            return Err(thrown_error(thrown)?);
        }
        let (Some(calls), Some(job)) = (held(py, stepper.calls), held(py, stepper.job)) else {
            return Ok(Stepped::Ended);
        };
        let begun = match calls.call_method1(intern!(py, "begin"), (job,)) {
            Ok(begun) => begun,
            Err(error) => {
                release(py, object);
                return Err(error);
            }
        };
        let stepper = unsafe { this(object) };
        if begun.is_none() {
            release(py, object);
            return Ok(Stepped::Ended);
        }
        stepper.coroutine = begun.clone().into_ptr();
        stepper.started = Some(Instant::now());
        begun
    };
    let mut coroutine = coroutine;
    let mut sent = sent;
    loop {
        let step = step(py, &coroutine, sent)?;
        let step = match step {
            Step::Yielded(yielded) => return Ok(Stepped::Yielded(yielded)),
            Step::Over(over) => over,
        };
        drop(coroutine);
        // SAFETY: see above.
        if unsafe { this(object) }.tail {
            // The tail ended: nothing more (its error, which it should not have, goes to the task).
            release(py, object);
            step?;
            return Ok(Stepped::Ended);
        }
        let none = py.None().into_bound(py);
        let tail = match step {
            Ok(output) => finish(py, object, output, none)?,
            Err(error) => finish(py, object, none, error.into_value(py).into_bound(py).into_any())?,
        };
        let Some(tail) = tail else {
            return Ok(Stepped::Ended);
        };
        // `end` handed back what is left of the call (its post hooks, its events): stepped now, as the rest
        // of the task.
        let stepper = unsafe { this(object) };
        stepper.coroutine = tail.clone().into_ptr();
        stepper.tail = true;
        coroutine = tail;
        sent = Sent::Value(py.None().into_bound(py));
    }
}

/// What one step of a coroutine gave: what it yielded, or how it ended (what it returned, or raised).
enum Step<'py> {
    Yielded(Bound<'py, PyAny>),
    Over(PyResult<Bound<'py, PyAny>>),
}

/// One step of `coroutine`, sent a value or thrown an exception. Only a failure to throw at all is an `Err`.
fn step<'py>(py: Python<'py>, coroutine: &Bound<'py, PyAny>, sent: Sent<'py>) -> PyResult<Step<'py>> {
    Ok(match sent {
        Sent::Value(value) => {
            let mut result: *mut ffi::PyObject = ptr::null_mut();
            // SAFETY: both are live objects borrowed for the call; `result` is a new reference (null only on an
            // error, fetched at once) owned by a `Bound` at once.
            unsafe {
                match ffi::PyIter_Send(coroutine.as_ptr(), value.as_ptr(), &raw mut result) {
                    ffi::PySendResult::PYGEN_NEXT => Step::Yielded(Bound::from_owned_ptr(py, result)),
                    ffi::PySendResult::PYGEN_RETURN => Step::Over(Ok(Bound::from_owned_ptr(py, result))),
                    ffi::PySendResult::PYGEN_ERROR => Step::Over(Err(PyErr::fetch(py))),
                }
            }
        }
        Sent::Thrown(thrown) => match coroutine.getattr(intern!(py, "throw"))?.call1(thrown) {
            Ok(yielded) => Step::Yielded(yielded),
            Err(error) if error.is_instance_of::<PyStopIteration>(py) => Step::Over(error.value(py).getattr("value")),
            Err(error) => Step::Over(Err(error)),
        },
    })
}

/// The tool's coroutine ended: everything is dropped, then `calls.end(job, output, error, milliseconds)`. While a
/// tail `end` handed back runs, the stepper holds `calls` again (which batch it is, for `abandon_closed`).
fn finish<'py>(
    py: Python<'py>,
    object: *mut ffi::PyObject,
    output: Bound<'py, PyAny>,
    error: Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    // SAFETY: see `advance`.
    let stepper = unsafe { this(object) };
    let started = stepper.started.take();
    let coroutine = take(py, &mut stepper.coroutine);
    let calls = take(py, &mut stepper.calls);
    let job = take(py, &mut stepper.job);
    unlink(stepper);
    drop(coroutine);
    let (Some(calls), Some(job)) = (calls, job) else {
        return Ok(None);
    };
    let milliseconds = started.map_or(0.0, |started| started.elapsed().as_secs_f64() * 1000.0);
    let tail = calls.call_method1(intern!(py, "end"), (job, output, error, milliseconds))?;
    if tail.is_none() {
        return Ok(None);
    }
    // SAFETY: see `advance`; the stepper holds nothing now (`end` ran with its fields empty).
    let stepper = unsafe { this(object) };
    if stepper.calls.is_null() {
        stepper.calls = calls.into_ptr();
        // SAFETY: a live stepper, not linked (unlinked above, and only `stepper` links).
        unsafe { link(std::ptr::from_mut(stepper)) };
    }
    Ok(Some(tail))
}

/// Drops everything the stepper holds (its call will not end through it).
fn release(py: Python<'_>, object: *mut ffi::PyObject) {
    // SAFETY: see `advance`. What is taken is dropped after the fields are cleared, so a finaliser it runs finds
    // the stepper empty.
    let stepper = unsafe { this(object) };
    stepper.started = None;
    unlink(stepper);
    let held = [
        take(py, &mut stepper.coroutine),
        take(py, &mut stepper.calls),
        take(py, &mut stepper.job),
        take(py, &mut stepper.event_loop),
    ];
    drop(held);
}

/// The exception `throw(*thrown)` raises: an instance, or a type (and its value) made into one.
fn thrown_error(thrown: &Bound<'_, PyTuple>) -> PyResult<PyErr> {
    let first = thrown.get_item(0)?;
    if thrown.len() > 1 {
        let value = thrown.get_item(1)?;
        if !value.is_none() {
            return Ok(if value.is_instance_of::<pyo3::exceptions::PyBaseException>() {
                PyErr::from_value(value)
            } else {
                PyErr::from_value(first.call1((value,))?)
            });
        }
    }
    Ok(PyErr::from_value(first))
}

/// Runs `body` as a slot's or method's body: a Rust panic becomes a Python exception, as pyo3 does for its own.
fn guarded<T>(body: impl FnOnce(Python<'_>) -> PyResult<T> + std::panic::UnwindSafe, failed: T) -> T {
    // SAFETY: every slot and method of the type is called by the interpreter with its thread attached.
    let py = unsafe { Python::assume_attached() };
    match std::panic::catch_unwind(move || body(py)) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => {
            error.restore(py);
            failed
        }
        Err(_) => {
            PyRuntimeError::new_err("the stepper failed (a panic in the engine)").restore(py);
            failed
        }
    }
}

unsafe extern "C" fn dealloc(object: *mut ffi::PyObject) {
    // SAFETY: the interpreter deallocates a stepper once, with its thread attached; the type reference the
    // allocation took is given back after the memory is freed.
    unsafe {
        let py = Python::assume_attached();
        release(py, object);
        let kind = ffi::Py_TYPE(object);
        ffi::PyObject_Free(object.cast());
        ffi::Py_DECREF(kind.cast());
    }
}

unsafe extern "C" fn itself(object: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: `object` is live; a new reference is returned.
    unsafe { ffi::Py_INCREF(object) };
    object
}

/// The task's step (`PyIter_Send`): no exception is made for the call's end.
unsafe extern "C" fn am_send(
    object: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
    result: *mut *mut ffi::PyObject,
) -> ffi::PySendResult {
    guarded(
        move |py| {
            // SAFETY: `value` is a live object borrowed for the call; `result` is the caller's out-pointer.
            let value = unsafe { Bound::from_borrowed_ptr(py, value) };
            match advance(py, object, Sent::Value(value)) {
                Ok(Stepped::Yielded(yielded)) => {
                    unsafe { *result = yielded.into_ptr() };
                    Ok(ffi::PySendResult::PYGEN_NEXT)
                }
                Ok(Stepped::Ended) => {
                    unsafe { *result = py.None().into_ptr() };
                    Ok(ffi::PySendResult::PYGEN_RETURN)
                }
                Err(error) => {
                    unsafe { *result = ptr::null_mut() };
                    Err(error)
                }
            }
        },
        ffi::PySendResult::PYGEN_ERROR,
    )
}

/// A step sent None (`next`): null without an exception once the call ended.
unsafe extern "C" fn iternext(object: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guarded(
        move |py| match advance(py, object, Sent::Value(py.None().into_bound(py)))? {
            Stepped::Yielded(yielded) => Ok(yielded.into_ptr()),
            Stepped::Ended => Ok(ptr::null_mut()),
        },
        ptr::null_mut(),
    )
}

unsafe extern "C" fn send(object: *mut ffi::PyObject, value: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guarded(
        move |py| {
            // SAFETY: `value` is a live object borrowed for the call.
            let value = unsafe { Bound::from_borrowed_ptr(py, value) };
            match advance(py, object, Sent::Value(value))? {
                Stepped::Yielded(yielded) => Ok(yielded.into_ptr()),
                Stepped::Ended => Err(PyStopIteration::new_err(())),
            }
        },
        ptr::null_mut(),
    )
}

unsafe extern "C" fn throw(object: *mut ffi::PyObject, args: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guarded(
        move |py| {
            // SAFETY: `args` is the live tuple of the call's arguments (`METH_VARARGS`).
            let thrown = unsafe { Bound::from_borrowed_ptr(py, args) }.cast_into::<PyTuple>()?;
            if thrown.is_empty() {
                return Err(PyTypeError::new_err("throw expected at least 1 argument, got 0"));
            }
            match advance(py, object, Sent::Thrown(thrown))? {
                Stepped::Yielded(yielded) => Ok(yielded.into_ptr()),
                Stepped::Ended => Err(PyStopIteration::new_err(())),
            }
        },
        ptr::null_mut(),
    )
}

unsafe extern "C" fn close(object: *mut ffi::PyObject, _: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guarded(
        move |py| {
            exclusive(object, || {
                // SAFETY: see `advance`.
                let coroutine = held(py, unsafe { this(object) }.coroutine);
                match coroutine {
                    None => release(py, object),
                    // The tail is closed as a coroutine is (it tells the group itself).
                    Some(coroutine) if unsafe { this(object) }.tail => {
                        release(py, object);
                        coroutine.call_method0("close")?;
                    }
                    Some(coroutine) => {
                        coroutine.call_method0("close")?;
                        drop(coroutine);
                        let exit = py.get_type::<pyo3::exceptions::PyGeneratorExit>().call0()?;
                        if let Some(tail) = finish(py, object, py.None().into_bound(py), exit)? {
                            // What is left of a closed call does not run.
                            release(py, object);
                            tail.call_method0("close")?;
                        }
                    }
                }
                Ok(py.None().into_ptr())
            })
        },
        ptr::null_mut(),
    )
}

/// An attribute of the tool's coroutine while there is one, else `default` (for `inspect.getcoroutinestate`
/// and a task's description).
fn of_coroutine(
    object: *mut ffi::PyObject,
    name: &'static str,
    default: fn(Python<'_>) -> Bound<'_, PyAny>,
) -> *mut ffi::PyObject {
    guarded(
        move |py| {
            // SAFETY: see `advance`.
            let coroutine = held(py, unsafe { this(object) }.coroutine);
            Ok(match coroutine {
                Some(coroutine) => coroutine.getattr(name)?.into_ptr(),
                None => default(py).into_ptr(),
            })
        },
        ptr::null_mut(),
    )
}

fn no(py: Python<'_>) -> Bound<'_, PyAny> {
    PyBool::new(py, false).to_owned().into_any()
}

fn nothing(py: Python<'_>) -> Bound<'_, PyAny> {
    py.None().into_bound(py)
}

unsafe extern "C" fn get_begun(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: see `advance`.
    let begun = unsafe { this(object) }.begun;
    guarded(
        move |py| Ok(PyBool::new(py, begun).to_owned().into_ptr()),
        ptr::null_mut(),
    )
}

unsafe extern "C" fn get_cr_running(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: see `advance`.
    if unsafe { this(object) }.running {
        return guarded(|py| Ok(PyBool::new(py, true).to_owned().into_ptr()), ptr::null_mut());
    }
    of_coroutine(object, "cr_running", no)
}

unsafe extern "C" fn get_cr_suspended(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "cr_suspended", no)
}

unsafe extern "C" fn get_cr_frame(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "cr_frame", nothing)
}

unsafe extern "C" fn get_cr_await(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "cr_await", nothing)
}

unsafe extern "C" fn get_cr_code(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "cr_code", nothing)
}

fn stepper_name(py: Python<'_>) -> Bound<'_, PyAny> {
    intern!(py, "Stepper").clone().into_any()
}

/// The tool's coroutine's names while there is one (a task's description names what its task runs).
unsafe extern "C" fn get_name(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "__name__", stepper_name)
}

unsafe extern "C" fn get_qualname(object: *mut ffi::PyObject, _: *mut c_void) -> *mut ffi::PyObject {
    of_coroutine(object, "__qualname__", stepper_name)
}
