package spec

// HeaderParams overrides a workflow's params for one call: a JSON object
// of names and values, {"threshold": 5000}. Each name must be a declared
// parameter, each value of its default's JSON type (any type where the
// default is null); otherwise the run is refused with BAD_REQUEST naming
// it. Parameters not named keep their defaults (Definition.ParamsFor).
const HeaderParams = "Reach-Params"
