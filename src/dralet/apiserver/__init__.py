from dralet.apiserver.server import (
    ApiServer,
    ApiServerSettings,
    ApiServerThread,
    ApiStatusError,
    WriteRecord,
    json_patch,
    main,
    merge_patch,
    schema_errors,
    served_versions,
    write_kubeconfig,
)

__all__ = [
    "ApiServer",
    "ApiServerSettings",
    "ApiServerThread",
    "ApiStatusError",
    "WriteRecord",
    "json_patch",
    "main",
    "merge_patch",
    "schema_errors",
    "served_versions",
    "write_kubeconfig",
]
