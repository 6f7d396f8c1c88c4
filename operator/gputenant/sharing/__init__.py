"""GPU-sharing mechanisms, one module each (time_slicing, hami, mig, exclusive), registered in
`registry.MECHANISMS`: what each grants and in which units, the spec block that parameterises it,
what the guard lets a pod ask for, and what its pools promise one pod (the canary attests it)."""
