// placeholder until the hooks land
