use pyo3::prelude::*;
