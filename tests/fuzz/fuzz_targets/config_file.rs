//! mlperf.conf / user.conf text: parsing, range checks and applying never
//! panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadgen_engine::config::{self, ConfKind, ConfigFile};
use loadgen_engine::{Scenario, TestSettings};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(file) = ConfigFile::parse("fuzz.conf", &text) else {
        return;
    };
    let _ = file.check_known_keys();
    for scenario in [
        Scenario::SingleStream,
        Scenario::MultiStream,
        Scenario::Server,
        Scenario::Offline,
    ] {
        let _ = file.check_values("resnet50", scenario, Some(24 << 30));
        let mut settings = TestSettings {
            scenario,
            ..TestSettings::default()
        };
        let _ = file.apply(&mut settings, "resnet50", scenario, ConfKind::UserConf);
        let _ = config::check_scale(&settings, Some(24 << 30));
    }
});
