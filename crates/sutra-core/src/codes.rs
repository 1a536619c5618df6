pub const X: u8 = 0;
