"""Where the steps are and what each piece of work belongs to: the step windows from the best source, each
call's and activity's step, microbatch and phase, the steps' periods and the stalls."""
