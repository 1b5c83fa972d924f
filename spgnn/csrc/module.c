/* The extension module spgnn._native: it holds the C kernels of spgnn/csrc, which `spgnn.native` loads with
 * ctypes; the module itself defines nothing. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef spgnn_native = {
    PyModuleDef_HEAD_INIT, "_native", "spgnn's C kernels, called through ctypes (spgnn.native).", -1, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&spgnn_native); }
