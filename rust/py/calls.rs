//! `ToolCall.__init__` in C for the usual call: a turn makes one `ToolCall` per
//! call the model sent, and a Python `__init__` costs a frame and three slot
//! writes through method wrappers. Given the ID, the name and the arguments
//! positionally, as exact text, exact text and exact text or an exact dict
//! (the ID non-empty), the three slots are written here, where the class
//! keeps them; any other call of it
//! (keywords, other types, a missing or extra value) is handed to the class's
//! own Python `__init__`, which checks, converts or refuses it as it always did.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use super::builders::{object_slot, write_slot, MethodDef};

/// What the C `__init__` needs: the class, where its three slots lie in an instance, and its Python `__init__`.
struct CallInit {
    cls: Py<PyType>,
    slots: [usize; 3],
    python_init: Py<PyAny>,
}

static INSTALLED: PyOnceLock<CallInit> = PyOnceLock::new();

/// The C `__init__` of `cls` (`ToolCall`), as a method descriptor to set as `cls.__init__`: the usual call
/// written here, every other one handed to `python_init(self, *args, **kwargs)`. Made for one class per
/// process; asked for another, it raises `TypeError` (that class keeps its Python `__init__`).
#[pyfunction]
pub fn call_init<'py>(cls: &Bound<'py, PyType>, python_init: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = cls.py();
    let own = cls.getattr("__dict__")?;
    let slot = |name: &str| -> PyResult<usize> {
        let descriptor = own.call_method1("get", (name,))?;
        // SAFETY: the interpreter is attached; `PyMemberDescr_Type` is a static type object, only its address
        // is taken; `object_slot` is given a member descriptor and a live type object.
        let offset = unsafe {
            let is_member = ffi::Py_TYPE(descriptor.as_ptr()) == &raw mut ffi::PyMemberDescr_Type;
            if is_member {
                object_slot(descriptor.as_ptr(), cls.as_ptr().cast::<ffi::PyTypeObject>())
            } else {
                None
            }
        };
        offset.ok_or_else(|| {
            let class = cls.qualname().map_or_else(|_| "?".to_owned(), |name| name.to_string());
            PyTypeError::new_err(format!("{class}.{name} is not an object slot of its own"))
        })
    };
    let installed = INSTALLED.get_or_try_init(py, || -> PyResult<CallInit> {
        Ok(CallInit {
            cls: cls.clone().unbind(),
            slots: [slot("id")?, slot("name")?, slot("args")?],
            python_init: python_init.clone().unbind(),
        })
    })?;
    if !installed.cls.bind(py).is(cls) || !installed.python_init.bind(py).is(python_init) {
        return Err(PyTypeError::new_err(
            "the C __init__ is made for one class and one Python __init__",
        ));
    }
    // SAFETY: the interpreter is attached; `INIT` is a static method definition CPython only reads, and `cls`
    // a live type object; the new reference is owned by a `Bound` at once (null on an error).
    unsafe {
        let definition = (&raw const INIT.0).cast_mut();
        Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(cls.as_ptr().cast(), definition))
    }
}

/// The method definition of the C `__init__`.
static INIT: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"__init__".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer {
        PyCFunctionFastWithKeywords: init_fast,
    },
    ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
    // The Python `__init__`'s parameters, for `inspect.signature` (of the class, and of subclasses that keep it).
    ml_doc:
        c"__init__($self, /, id, name, args={})\n--\n\nA call of tool `name` with `args` (a mapping, or JSON text)."
            .as_ptr(),
});

/// The usual call written here; any other handed to the Python `__init__`. Returns None (a new reference),
/// or null with the error set.
unsafe extern "C" fn init_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls this with the interpreter attached, `slf` an instance of the class the method
    // descriptor was made for (it checks), `args` `nargs` positional values followed by one value per name in
    // `kwnames` (a tuple, or null), all borrowed for the call. Nothing here panics.
    unsafe {
        let py = Python::assume_attached();
        let Some(installed) = INSTALLED.get(py) else {
            Python::attach(|py| PyTypeError::new_err("ToolCall's C __init__ was not installed").restore(py));
            return std::ptr::null_mut();
        };
        let keywords = if kwnames.is_null() {
            0
        } else {
            ffi::PyTuple_GET_SIZE(kwnames)
        };
        if keywords == 0 && (nargs == 2 || nargs == 3) {
            let id = *args;
            let name = *args.add(1);
            let given = if nargs == 3 { *args.add(2) } else { ffi::PyDict_New() };
            if given.is_null() {
                return std::ptr::null_mut();
            }
            let usual = ffi::PyUnicode_CheckExact(id) != 0
                && ffi::PyUnicode_GetLength(id) > 0
                && ffi::PyUnicode_CheckExact(name) != 0
                && (ffi::PyUnicode_CheckExact(given) != 0 || ffi::PyDict_CheckExact(given) != 0);
            if usual {
                // `slf` is an instance of the class or of a subclass (the method descriptor checks), which
                // keeps the class's slots where the class has them.
                for (offset, value) in installed.slots.into_iter().zip([id, name, given]) {
                    write_slot(slf, offset, value);
                }
            }
            if nargs == 2 {
                // The empty dict made above: the slot holds its own reference, if written.
                ffi::Py_DECREF(given);
            }
            if usual {
                return ffi::Py_NewRef(ffi::Py_None());
            }
        }
        // Anything else, as the class's Python `__init__` answers it: `python_init(self, *args, **kwargs)`.
        let total = usize::try_from(nargs).unwrap_or(0) + usize::try_from(keywords).unwrap_or(0);
        let mut with_self: Vec<*mut ffi::PyObject> = Vec::with_capacity(total + 1);
        with_self.push(slf);
        with_self.extend_from_slice(if total == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(args, total)
        });
        ffi::PyObject_Vectorcall(
            installed.python_init.as_ptr(),
            with_self.as_ptr(),
            // The positional values, self included; the keyword values follow them in the array.
            usize::try_from(nargs).unwrap_or(0) + 1,
            if keywords == 0 { std::ptr::null_mut() } else { kwnames },
        )
    }
}
