//! The `devinfo` example's format of the extended-attribute block (`ibv_devinfo -v`'s lines
//! between `local_ca_ack_delay` and `num_comp_vectors`): its unit tests, compiled here with
//! the module so that `cargo test` runs them while it builds `devinfo` as the plain program
//! that the twin and VM tests run.

#[path = "../examples/devinfo/extended.rs"]
mod extended;
