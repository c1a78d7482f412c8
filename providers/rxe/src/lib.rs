//! rdmasock provider: rxe
#![deny(missing_docs)]
