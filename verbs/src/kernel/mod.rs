//! The uverbs control path shared by kernel-backed providers (rxe, siw): opening
//! `/dev/infiniband/uverbsN`, GET_CONTEXT, and every write command, with the driver data
//! ("udata") each provider adds.
