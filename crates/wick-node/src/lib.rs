#[macro_use]
extern crate napi_derive;
#[napi]
pub fn ping() -> u32 { 1 }
