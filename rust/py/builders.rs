//! Instances of a slotted class built from positional values in C: each value
//! written through its slot's own member descriptor, with no `__init__`, no
//! `__setattr__` and no Python frame. For the values the executor makes per
//! call (results, hook events, events, outcomes, jobs), whose frozen
//! dataclass `__init__` looks each field's name up to write it through
//! `object.__setattr__`. A slot that is a plain object slot of the class
//! itself is written where the class's layout keeps it, as its descriptor
//! would write it (`python benches/instructions.py 3 10 --runs 100 --wait
//! --full --by-function`: the descriptor's generic setter took about 2.8k
//! instructions of each waiting call's 4.6k for its values).

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

/// Builds instances of `cls` from positional values for the slots `names`,
/// in that order; the last `len(defaults)` may be left out and take those
/// values. Each slot must be a member descriptor in the class's own
/// `__dict__` (`__slots__` of the class itself).
#[pyclass(module = "toolsched._core", name = "SlotBuilder", frozen)]
pub struct PySlotBuilder {
    cls: Py<PyType>,
    // Each slot's member descriptor, in the order its value is given.
    slots: Vec<Py<PyAny>>,
    // Where each slot is in an instance, counted in pointers from its start, for a plain object slot of
    // `cls` itself (None: written through its descriptor).
    offsets: Vec<Option<usize>>,
    defaults: Vec<Py<PyAny>>,
    names: Vec<String>,
}

#[pymethods]
impl PySlotBuilder {
    #[new]
    #[pyo3(signature = (cls, names, defaults=None))]
    fn new(cls: &Bound<'_, PyType>, names: Vec<String>, defaults: Option<&Bound<'_, PyTuple>>) -> PyResult<Self> {
        // A class made by a `class` statement directly on object, to tell such classes by their deallocator: an
        // extension type (a C or PyO3 class) on object is a heap type too, and may need its own `__new__`.
        let py = cls.py();
        let reference = py.get_type::<PyType>().call1(("_Reference", (), PyDict::new(py)))?;
        // SAFETY: the interpreter is attached and both are live type objects; only flags, base and
        // deallocator are read.
        let plain = unsafe {
            let raw = cls.as_ptr().cast::<ffi::PyTypeObject>();
            let made_in_python = reference.as_ptr().cast::<ffi::PyTypeObject>();
            let refused = ffi::Py_TPFLAGS_IS_ABSTRACT | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION;
            (*raw).tp_flags & ffi::Py_TPFLAGS_HEAPTYPE != 0
                && (*raw).tp_flags & refused == 0
                && (*raw).tp_base == &raw mut ffi::PyBaseObject_Type
                && match ((*raw).tp_dealloc, (*made_in_python).tp_dealloc) {
                    // Both read from CPython's own type objects: the same C function, one address.
                    (Some(dealloc), Some(python_dealloc)) => std::ptr::fn_addr_eq(dealloc, python_dealloc),
                    _ => false,
                }
        };
        if !plain {
            // Built-in types and classes with a base other than `object` may need more than their slots set
            // (their own `__new__`, fields a base's deallocator reads): never made here.
            return Err(PyTypeError::new_err(format!(
                "{} is not a class defined in Python directly on object (or is abstract)",
                cls.qualname()?
            )));
        }
        let own = cls.getattr("__dict__")?;
        let mut slots = Vec::with_capacity(names.len());
        let mut offsets = Vec::with_capacity(names.len());
        for name in &names {
            let descriptor = own.call_method1("get", (name,))?;
            if descriptor.is_none() {
                return Err(PyTypeError::new_err(format!(
                    "{} has no slot {name:?} of its own",
                    cls.qualname()?
                )));
            }
            // SAFETY: the interpreter is attached; `PyMemberDescr_Type` is a static type object, only its
            // address is taken.
            let is_member = unsafe { ffi::Py_TYPE(descriptor.as_ptr()) == &raw mut ffi::PyMemberDescr_Type };
            if !is_member {
                return Err(PyTypeError::new_err(format!(
                    "{}.{name} is not a slot (a member descriptor)",
                    cls.qualname()?
                )));
            }
            // SAFETY: the interpreter is attached; the descriptor is a member descriptor (checked above),
            // so it has that layout and a member definition it keeps alive; `cls` is a live type object.
            offsets.push(unsafe { object_slot(descriptor.as_ptr(), cls.as_ptr().cast::<ffi::PyTypeObject>()) });
            slots.push(descriptor.unbind());
        }
        let defaults: Vec<Py<PyAny>> = match defaults {
            None => Vec::new(),
            Some(values) => values.iter().map(Bound::unbind).collect(),
        };
        if defaults.len() > names.len() {
            return Err(PyTypeError::new_err("more defaults than slots"));
        }
        // Every slot of the class itself is written: none is left unset (an `AttributeError` on its first read).
        for (key, value) in own
            .call_method0("items")?
            .try_iter()?
            .map(|item| item?.extract::<(String, Bound<'_, PyAny>)>())
            .collect::<PyResult<Vec<_>>>()?
        {
            // SAFETY: the interpreter is attached; only the address of the static type object is taken, and a
            // member descriptor (checked first) has the layout `object_slot` reads.
            let own_slot = unsafe {
                ffi::Py_TYPE(value.as_ptr()) == &raw mut ffi::PyMemberDescr_Type
                    && object_slot(value.as_ptr(), cls.as_ptr().cast::<ffi::PyTypeObject>()).is_some()
            };
            if own_slot && !names.contains(&key) {
                return Err(PyTypeError::new_err(format!(
                    "{} has a slot {key:?} the builder does not write: it would be left unset",
                    cls.qualname()?
                )));
            }
        }
        Ok(Self {
            cls: cls.clone().unbind(),
            slots,
            offsets,
            defaults,
            names,
        })
    }

    /// The builder as a function of the values (a built-in function taking them positionally, called
    /// without an argument tuple): what the executor calls per call.
    fn function<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // SAFETY: the interpreter is attached; `BUILD` is a static method definition CPython only reads,
        // and the new function holds its own reference to the builder (its `self`), so the builder lives
        // as long as the function; the new reference is owned by a `Bound` at once (null on an error).
        unsafe {
            let definition = (&raw const BUILD.0).cast_mut();
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyCFunction_NewEx(definition, slf.as_ptr(), std::ptr::null_mut()),
            )
        }
    }

    #[pyo3(signature = (*values))]
    fn __call__<'py>(&self, py: Python<'py>, values: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        let held: Vec<Bound<'py, PyAny>> = values.iter().collect();
        let pointers: Vec<*mut ffi::PyObject> = held.iter().map(Bound::as_ptr).collect();
        // SAFETY: each pointer is a value `held` keeps alive for the whole call.
        unsafe { self.build(py, &pointers) }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let class = self
            .cls
            .bind(py)
            .qualname()
            .map_or_else(|_| "?".to_owned(), |name| name.to_string());
        format!("SlotBuilder({class}: {})", self.names.join(", "))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.cls)?;
        for held in self.slots.iter().chain(&self.defaults) {
            visit.call(held)?;
        }
        Ok(())
    }
}

impl PySlotBuilder {
    /// A new instance of the class with `values` written to the first slots and the defaults to the rest.
    ///
    /// # Safety
    /// Each of `values` must be a live object for the whole call.
    unsafe fn build<'py>(&self, py: Python<'py>, values: &[*mut ffi::PyObject]) -> PyResult<Bound<'py, PyAny>> {
        let given = values.len();
        let total = self.slots.len();
        let required = total - self.defaults.len();
        if given < required || given > total {
            return Err(self.miscounted(py, given));
        }
        let cls_ptr = self.cls.as_ptr().cast::<ffi::PyTypeObject>();
        // SAFETY: the interpreter is attached; `cls` is a live type object (held by the builder), and
        // `tp_alloc` returns a new, zero-filled instance (tracked by the collector if the type is), owned
        // by a `Bound` at once (null only on an error).
        let instance = unsafe {
            let alloc = (*cls_ptr).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            Bound::from_owned_ptr_or_err(py, alloc(cls_ptr, 0))?
        };
        // The slots not given take the last defaults: with `required` values given, all of them; with more,
        // the defaults of the slots left.
        let defaults = self.defaults[given - required..].iter().map(Py::as_ptr);
        for (((slot, offset), value), name) in self
            .slots
            .iter()
            .zip(&self.offsets)
            .zip(values.iter().copied().chain(defaults))
            .zip(&self.names)
        {
            if let Some(offset) = *offset {
                // SAFETY: `offset` is where an object slot of `cls` itself lies inside an instance (checked
                // when the builder was made: within the class's basic size, aligned, past the object header),
                // and `instance` is an instance of exactly `cls`; as the descriptor's own setter does, the
                // slot takes a new reference to `value` (a live object) and lets go of what it held (nothing
                // in a new instance, the first value when a builder names a slot twice).
                unsafe { write_slot(instance.as_ptr(), offset, value) };
                continue;
            }
            // SAFETY: every slot is a member descriptor of `cls` (checked when the builder was made), whose
            // type's `tp_descr_set` writes the value into an instance of `cls`, taking its own reference;
            // `value` is a live object (an argument of the call, or a default the builder holds).
            let written = unsafe {
                match (*ffi::Py_TYPE(slot.as_ptr())).tp_descr_set {
                    Some(set) => set(slot.as_ptr(), instance.as_ptr(), value),
                    None => -1,
                }
            };
            if written != 0 {
                return Err(PyErr::take(py)
                    .unwrap_or_else(|| PyRuntimeError::new_err(format!("slot {name:?} could not be written"))));
            }
        }
        Ok(instance)
    }

    fn miscounted(&self, py: Python<'_>, given: usize) -> PyErr {
        let total = self.slots.len();
        let required = total - self.defaults.len();
        let class = self
            .cls
            .bind(py)
            .qualname()
            .map_or_else(|_| "?".to_owned(), |name| name.to_string());
        let expected = if required == total {
            total.to_string()
        } else {
            format!("{required} to {total}")
        };
        PyTypeError::new_err(format!(
            "{class} takes {expected} positional values ({}), {given} given",
            self.names.join(", ")
        ))
    }
}

/// Where the slot a member descriptor stands for lies inside an instance of `cls` (in pointers from its
/// start), when it is a writable object slot (`T_OBJECT_EX`, as `__slots__` makes) defined by `cls` itself
/// and inside its basic size: what `build` may write directly. None for anything else (written through the descriptor).
///
/// # Safety
/// `descriptor` must be a live member descriptor (`PyMemberDescr_Type`) and `cls` a live type object.
pub(super) unsafe fn object_slot(descriptor: *mut ffi::PyObject, cls: *mut ffi::PyTypeObject) -> Option<usize> {
    // SAFETY: the caller's promise: the descriptor has a member descriptor's layout, whose definition it
    // keeps alive as long as it lives; only plain fields are read.
    unsafe {
        let descriptor = descriptor.cast::<ffi::PyMemberDescrObject>();
        let member = (*descriptor).d_member;
        if member.is_null() || (*descriptor).d_common.d_type != cls {
            return None;
        }
        let (kind, flags, offset) = ((*member).type_code, (*member).flags, (*member).offset);
        let pointer = std::mem::size_of::<*mut ffi::PyObject>();
        let offset = usize::try_from(offset).ok()?;
        let size = usize::try_from((*cls).tp_basicsize).ok()?;
        let fits = offset >= std::mem::size_of::<ffi::PyObject>() && offset % pointer == 0 && offset + pointer <= size;
        (kind == ffi::Py_T_OBJECT_EX && flags & ffi::Py_READONLY == 0 && fits).then_some(offset / pointer)
    }
}

/// Writes `value` into the object slot `offset` pointers from the start of `instance`, taking a new reference to
/// it, and lets go of what the slot held: what a member descriptor's setter does for such a slot.
///
/// # Safety
/// `offset` must be `object_slot`'s answer for a class `instance` is an instance of, and `value` a live object.
pub(super) unsafe fn write_slot(instance: *mut ffi::PyObject, offset: usize, value: *mut ffi::PyObject) {
    // SAFETY: the caller's promise: the slot lies inside the instance, aligned, and holds an object or null.
    unsafe {
        let place = instance.cast::<*mut ffi::PyObject>().add(offset);
        let old = *place;
        *place = ffi::Py_NewRef(value);
        ffi::Py_XDECREF(old);
    }
}

/// A method definition made once, for C functions of our own that CPython calls.
pub(super) struct MethodDef(pub(super) ffi::PyMethodDef);

// SAFETY: the definition is never written after it is made; CPython only reads it.
unsafe impl Sync for MethodDef {}

/// A turn's jobs in one crossing (`plan_calls`): for each slot, `builder` given `(slot, calls[slot],
/// tools[index], facts[index], args, index, rulings[slot], args)`, where `index = tool_rows[slot]` and
/// `args = arg_rows[slot]` (a job's slots in `new_job`'s order); what a Python comprehension did, without
/// the per-call tuples and lookups of its loop. The rows are `ToolTable.prepare`'s for calls none of which
/// was refused: every list the same length, every index within `tools` and `facts`.
#[pyfunction]
pub(super) fn turn_jobs<'py>(
    builder: &Bound<'py, PySlotBuilder>,
    calls: &Bound<'py, PyList>,
    tools: &Bound<'py, PyTuple>,
    facts: &Bound<'py, PyTuple>,
    tool_rows: &Bound<'py, PyList>,
    arg_rows: &Bound<'py, PyList>,
    rulings: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let py = builder.py();
    let count = calls.len();
    if tool_rows.len() != count || arg_rows.len() != count || rulings.len() != count {
        return Err(PyTypeError::new_err(format!(
            "turn_jobs: {count} calls, {} tool rows, {} argument rows and {} rulings",
            tool_rows.len(),
            arg_rows.len(),
            rulings.len()
        )));
    }
    if tools.len() != facts.len() {
        return Err(PyTypeError::new_err(format!(
            "turn_jobs: {} tools and {} facts",
            tools.len(),
            facts.len()
        )));
    }
    let builder = builder.get();
    let jobs = PyList::empty(py);
    for slot in 0..count {
        let index_object = tool_rows.get_item(slot)?;
        // Exactly an int (the engine's rows are): nothing of the caller's runs here, no `__index__` is asked.
        let row = if index_object.is_exact_instance_of::<PyInt>() {
            index_object.extract::<i64>().ok()
        } else {
            None
        };
        let index = match row.and_then(|row| usize::try_from(row).ok()) {
            Some(index) if index < tools.len() => index,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "turn_jobs: tool row {} of slot {slot} is not an index of the {} tools",
                    index_object.repr()?,
                    tools.len()
                )))
            }
        };
        let slot_object = slot.into_pyobject(py)?;
        let call = calls.get_item(slot)?;
        let tool = tools.get_item(index)?;
        let fact = facts.get_item(index)?;
        let args = arg_rows.get_item(slot)?;
        let ruling = rulings.get_item(slot)?;
        let values = [
            slot_object.as_ptr(),
            call.as_ptr(),
            tool.as_ptr(),
            fact.as_ptr(),
            args.as_ptr(),
            index_object.as_ptr(),
            ruling.as_ptr(),
            args.as_ptr(),
        ];
        // SAFETY: each pointer is an object a `Bound` of this iteration holds alive for the whole build.
        let job = unsafe { builder.build(py, &values)? };
        jobs.append(job)?;
    }
    Ok(jobs)
}

/// The method definition of every builder's function (`SlotBuilder.function`): its `self` is the builder.
static BUILD: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"build".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        PyCFunctionFast: build_fast,
    },
    ml_flags: ffi::METH_FASTCALL,
    ml_doc: c"The builder's class built from its slots' values, given positionally.".as_ptr(),
});

/// `SlotBuilder.function`'s body: `slf` is the builder, `args` the `nargs` values, called with the
/// interpreter attached; returns the new instance, or null with the error set.
unsafe extern "C" fn build_fast(
    slf: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the interpreter attached, `slf` the builder the function was made
    // with (a `SlotBuilder`, kept alive by the function) and `args` an array of `nargs` live references
    // borrowed for the call; nothing here panics (every index is checked).
    unsafe {
        let py = Python::assume_attached();
        let builder = Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<PySlotBuilder>();
        let count = usize::try_from(nargs).unwrap_or(0);
        let values: &[*mut ffi::PyObject] = if count == 0 || args.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(args, count)
        };
        match builder.get().build(py, values) {
            Ok(instance) => instance.into_ptr(),
            Err(error) => {
                // Restored where PyO3 knows the interpreter is attached: what the error lets go of is let go
                // now, not kept for PyO3's next entry (no frame counts it attached here).
                Python::attach(|py| error.restore(py));
                std::ptr::null_mut()
            }
        }
    }
}
