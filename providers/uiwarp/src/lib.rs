//! rdmasock provider: uiwarp
#![deny(missing_docs)]
