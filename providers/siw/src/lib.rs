//! rdmasock provider: siw
#![deny(missing_docs)]
