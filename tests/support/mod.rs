pub mod mini_mongo;
pub mod wire;
