// The root of the module scripts/k8s-build builds; the pins of each release it builds are in
// v1.<minor>/go.mod and go.sum, which the build names with -modfile (this file is not read).
module dralet.invalid/k8s

go 1.26.0
