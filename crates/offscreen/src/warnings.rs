//! The model's and cubecl's warnings (`hearth_model::warnings`) to the offscreen document's console.

use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = warn)]
    fn console_warn(message: &str);
}

pub fn install() {
    hearth_model::warnings::send_to(console_warn);
}
