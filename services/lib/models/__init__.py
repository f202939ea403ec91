"""The model catalogue and its resolution rules, shared by the models service and its snapshot holders."""
