//! Crossing process boundaries: pickle protocol 5 for tensors and tables, shared memory and
//! CUDA IPC handles.

pub mod pickle;
