//! Where warnings go: the model's own (a step recording that failed, so the step ran launch by
//! launch instead) and its libraries' (cubecl's), all through the `log` facade. The program
//! names the sink: the terminal's stderr, the offscreen document's console.

/// Sends every warning and error logged from now on to `sink` (once per process; a second call
/// changes nothing).
pub fn send_to(sink: fn(&str)) {
    static SINK: std::sync::OnceLock<Warnings> = std::sync::OnceLock::new();
    let logger = SINK.get_or_init(|| Warnings { sink });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

struct Warnings {
    sink: fn(&str),
}

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            (self.sink)(&format!("{} ({}): {}", record.level(), record.target(), record.args()));
        }
    }

    fn flush(&self) {}
}
